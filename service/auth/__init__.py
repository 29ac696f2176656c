"""Who may do what: roles, bearer tokens (stored hashed) and review-page sessions."""
