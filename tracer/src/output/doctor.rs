//! `tracer doctor`'s report: the checks and the hook plan, as text or JSON.

use std::fmt::Write;

use crate::kernel::loader::probes::{self, ProbeStatus};

/// A check's outcome; a failure shouts (`FAIL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Status {
    Ok,
    /// Worth knowing, does not stop `follow` on this kernel.
    Warn,
    #[strum(serialize = "FAIL")]
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

/// `ok` when the condition holds, else `if_not`.
pub fn check(name: &'static str, ok: bool, if_not: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status: if ok { Status::Ok } else { if_not },
        detail: detail.into(),
    }
}

pub struct Report {
    pub checks: Vec<Check>,
    pub plan: Vec<ProbeStatus>,
}

impl Report {
    /// No check failed: tracer can run here.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    pub fn json(&self) -> String {
        serde_json::json!({
            "ok": self.ok(),
            "checks": self.checks
                .iter()
                .map(|c| serde_json::json!({"name": c.name, "status": c.status.as_str(), "detail": c.detail}))
                .collect::<Vec<_>>(),
            "hooks": self.plan,
        })
        .to_string()
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        for c in &self.checks {
            let _ = writeln!(s, "{:<4} {:<13} {}", c.status.as_str(), c.name, c.detail);
        }
        s.push_str("\nhooks (plan for this kernel):\n");
        for p in &self.plan {
            let _ = writeln!(
                s,
                "  {:<14} {:<7} {:<26} {}",
                p.hook,
                p.backend,
                p.target,
                p.not_needed
                    .as_ref()
                    .map(|w| format!("not needed: {w}"))
                    .or_else(|| p.error.clone())
                    .unwrap_or_else(|| format!("feeds {}", p.feeds))
            );
            // Why a better backend was not taken.
            for f in p.fallbacks.iter().filter(|f| Some(*f) != p.error.as_ref()) {
                let _ = writeln!(s, "  {:<14} {:<7} {:<26} passed over: {f}", "", "", "");
            }
        }
        let _ = writeln!(
            s,
            "\nbackends: {}",
            probes::backend_summary_planned(&self.plan)
        );
        let _ = write!(
            s,
            "\n{}",
            if self.ok() {
                "tracer can run here"
            } else {
                "tracer cannot run here: see FAIL lines"
            }
        );
        s
    }
}
