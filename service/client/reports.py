"""Replies rendered as text for people: an error envelope, and a gate decision as the report
``calmon gate`` prints."""

from __future__ import annotations

from typing import Any


def error_text(reply: Any) -> str:
    """A one-paragraph rendering of an error envelope."""
    error = reply.get("error", {}) if isinstance(reply, dict) else {}
    lines = [f"{error.get('code', 'error')}: {error.get('message', reply)}"]
    for detail in error.get("details", [])[:20]:
        lines.append(f"  - {detail.get('field')}: {detail.get('message')}")
    return "\n".join(lines)


def gate_report(decision: dict[str, Any]) -> str:
    """A reviewer-readable report of a gate decision: checks, then the reliability table."""
    evidence = decision["evidence"]
    contract = evidence["contract"]
    lines = [
        f"gate {decision['decision'].upper()}  contract {contract['model']} "
        f"v{contract['version']} ({contract['id']})",
        f"decision {decision['id']} by {decision['decided_by']} at {decision['decided_at']}",
        "",
    ]
    for check in decision["checks"]:
        mark = "PASS" if check["passed"] else "FAIL"
        lines.append(f"  [{mark}] {check['name']:<18} {check['message']}")
    ci = evidence.get("ece_ci") or [None, None]
    lines += [
        "",
        f"evidence: {_evidence_kind(evidence)}, n = {evidence['n']}",
        f"  ECE debiased {_num(evidence.get('ece_debiased'))} (95% interval {_num(ci[0])} - "
        f"{_num(ci[1])}; plug-in {_num(evidence['ece'])}; calibration test p = "
        f"{_num(evidence.get('calibration_p_value'))})",
        f"  NLL {_num(evidence['nll']['uncalibrated'])} -> {_num(evidence['nll']['calibrated'])}",
        "",
        "  bin            n   confidence  accuracy  95% interval",
    ]
    for b in evidence["reliability"]:
        lines.append(
            f"  [{b['lo']:.2f}, {b['hi']:.2f}) {b['n']:>6}   {b['mean_confidence']:.4f}"
            f"      {b['accuracy']:.4f}    {b['ci'][0]:.4f} - {b['ci'][1]:.4f}"
        )
    return "\n".join(lines)


def _evidence_kind(evidence: dict[str, Any]) -> str:
    """What the gate judged, and who measured it."""
    if evidence["source"]["kind"] == "evaluation":
        return "a fresh evaluation set, measured by calmon"
    source = evidence.get("baseline_source")
    if source == "measured":
        return "the contract's held-out baseline, measured by calmon when it fitted the contract"
    if source == "supplied":
        return (
            "the contract's held-out baseline, supplied by the registrant (not measured by calmon)"
        )
    return f"{evidence['source']['kind']} (baseline source not recorded)"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
