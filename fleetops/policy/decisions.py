"""One decision of a rule (deny, warn, or waived), as every report and the decision log show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fleetops.envelope import DecisionStatus, Severity
from fleetops.policy.bundle import word
from fleetops.policy.engine import Results


@dataclass(frozen=True)
class Decision:
    package: str
    kind: Literal["deny", "warn"]
    rule: str
    msg: str
    severity: Severity
    resource: dict[str, Any]
    # The numbers the message states, as the rule computed them ({"quota": 68, "limit": 57, ...}), so
    # that the plan's fix reads them rather than parsing a message a policy author may reword.
    figures: dict[str, Any] = field(default_factory=dict)
    waived_by: str | None = None  # file:line of the waiver
    # Values the rule's fix (METADATA custom.fix) names beyond its resource and figures (how many nodes
    # to add, to which pool): only the plan's fix reads them, so they are in no report and no record.
    fix_values: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> DecisionStatus:
        return DecisionStatus.WAIVED if self.waived_by else DecisionStatus(self.kind)

    def resource_ref(self, with_cluster: bool = True) -> str:
        r = self.resource
        parts = [r.get("kind"), r.get("namespace"), r.get("name")]
        ref = "/".join(str(p) for p in parts if p)
        return f"{r['cluster']}:{ref}" if with_cluster and r.get("cluster") else ref

    def as_dict(self) -> dict[str, Any]:
        """The one decision shape of every command's output (fleetops/schemas/output.schema.json)."""
        return {
            "status": self.status.value,
            "rule": self.rule,
            "severity": self.severity.value,
            "msg": self.msg,
            "resource": self.resource_ref(),
            "subject": self.resource,
            "package": self.package,
            "figures": self.figures,
            "waived_by": self.waived_by,
        }


def to_decisions(results: Results) -> list[Decision]:
    out = []
    for package, kinds in results.items():
        for kind in ("deny", "warn"):
            for d in kinds.get(kind, []):
                out.append(
                    Decision(
                        package=package,
                        kind=kind,  # type: ignore[arg-type]
                        rule=str(d["rule"]),
                        msg=str(d.get("msg", "")),
                        severity=word(d.get("severity", Severity.HIGH if kind == "deny" else Severity.LOW), Severity,
                                      f"{package}: a decision of {d.get('rule')} has severity"),
                        resource=d.get("resource") if isinstance(d.get("resource"), dict) else {},
                        figures=d.get("figures") if isinstance(d.get("figures"), dict) else {},
                        fix_values=d.get("fix_values") if isinstance(d.get("fix_values"), dict) else {},
                    )
                )
    # Stable order for reports and digests: denies first, then by rule and resource.
    return sorted(out, key=lambda d: (d.kind != "deny", d.rule, d.resource_ref(), d.msg))
