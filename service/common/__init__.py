"""What every capability shares: domain errors, value checks, request declarations, the clock."""
