"""The pure numpy/scipy calibration core of calmon: arrays in, frozen dataclasses out.

Conventions (see docs/calibration.md): float64 throughout; natural logs; bins are left-closed
``[e(m-1), e(m))`` with the last one closed ``[e(M-1), 1]``; argmax ties go to the lowest index.
"""

from service.calibration.binning import assign_bins, default_edges, validate_edges
from service.calibration.calibration_stats import (
    AUC_CELLS,
    CalibrationStats,
    combine_stats,
    empty_stats,
)
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    binary_probabilities,
    calibrator_from_dict,
    multiclass_probabilities,
)
from service.calibration.drift import Drift, DriftPolicy, ExpectedAccuracy, assess_drift
from service.calibration.ece_inference import EceInference, infer_ece
from service.calibration.errors import CalibrationInputError, FitError
from service.calibration.fitting import (
    PlattFit,
    TemperatureFit,
    fit_binary_temperature,
    fit_log_odds_temperature,
    fit_platt,
    fit_temperature,
    refit_temperature,
)
from service.calibration.intervals import ece_interval, wilson_interval
from service.calibration.probabilities import log_sigmoid, log_softmax, logit, sigmoid, softmax
from service.calibration.ranking import binary_auc, decision_threshold, histogram_auc
from service.calibration.readings import Reading, ReliabilityBin, bins_inference, reading_from_stats
from service.calibration.refit import RefitEstimate, refit_from_knot_sums
from service.calibration.row_readings import (
    binary_expected_accuracy,
    binary_reading,
    multiclass_expected_accuracy,
    multiclass_reading,
)
from service.calibration.shift import (
    ConfidenceShift,
    confidence_shift,
    population_stability_index,
    total_variation,
)
from service.calibration.stats import binary_stats, multiclass_stats

__all__ = [
    "AUC_CELLS",
    "CalibrationInputError",
    "CalibrationStats",
    "Calibrator",
    "ConfidenceShift",
    "Drift",
    "DriftPolicy",
    "EceInference",
    "ExpectedAccuracy",
    "FitError",
    "IdentityCalibrator",
    "PlattCalibrator",
    "PlattFit",
    "Reading",
    "RefitEstimate",
    "ReliabilityBin",
    "TemperatureCalibrator",
    "TemperatureFit",
    "assess_drift",
    "assign_bins",
    "binary_auc",
    "binary_expected_accuracy",
    "binary_probabilities",
    "binary_reading",
    "binary_stats",
    "bins_inference",
    "calibrator_from_dict",
    "combine_stats",
    "confidence_shift",
    "decision_threshold",
    "default_edges",
    "ece_interval",
    "empty_stats",
    "fit_binary_temperature",
    "fit_log_odds_temperature",
    "fit_platt",
    "fit_temperature",
    "histogram_auc",
    "infer_ece",
    "log_sigmoid",
    "log_softmax",
    "logit",
    "multiclass_expected_accuracy",
    "multiclass_probabilities",
    "multiclass_reading",
    "multiclass_stats",
    "population_stability_index",
    "reading_from_stats",
    "refit_from_knot_sums",
    "refit_temperature",
    "sigmoid",
    "softmax",
    "total_variation",
    "validate_edges",
    "wilson_interval",
]
