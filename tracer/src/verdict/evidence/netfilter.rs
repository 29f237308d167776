//! The sentences of netfilter's drops: the hook, the chain's verdict, and
//! the rule found by its counter or by nf_tables tracing.

use std::fmt;

use crate::node::nftrace::MapElement;

/// [`super::Evidence::NfHookDrop`].
pub(super) fn hook_drop(f: &mut fmt::Formatter<'_>, hook: &str, backend: &str) -> fmt::Result {
    write!(
        f,
        "nf_hook_slow returned DROP at netfilter hook {hook} [{backend}]"
    )
}

/// [`super::Evidence::NfHookInferred`].
pub(super) fn hook_inferred(f: &mut fmt::Formatter<'_>, hook: &str) -> fmt::Result {
    write!(
        f,
        "netfilter hook {hook} inferred from the packet's path (no nf_hook_slow function hook here)"
    )
}

/// [`super::Evidence::NfChainVerdict`].
pub(super) fn chain_verdict(
    f: &mut fmt::Formatter<'_>,
    backend: &str,
    detail: &str,
) -> fmt::Result {
    write!(f, "{detail} [{backend}]")
}

/// [`super::Evidence::NfRuleMoved`] and
/// [`super::Evidence::NoLocalEndpointsRuleMoved`].
pub(super) fn rule_moved(
    f: &mut fmt::Formatter<'_>,
    family: &str,
    table: &str,
    chain: &str,
    delta: u64,
) -> fmt::Result {
    write!(
        f,
        "rule counter moved by {delta} while tracing: table {}{table} chain {chain}",
        if family.is_empty() {
            String::new()
        } else {
            format!("{family} ")
        }
    )
}

/// The fields of [`super::Evidence::NfRuleTraced`] its sentence tells.
pub(super) struct RuleTraced<'a> {
    pub(super) family: &'a String,
    pub(super) table: &'a String,
    pub(super) chain: &'a String,
    pub(super) handle: &'a u64,
    pub(super) rule: &'a String,
    pub(super) comment: &'a Option<String>,
    pub(super) verdict: &'a String,
    pub(super) via: &'a Vec<String>,
    pub(super) element: &'a Option<MapElement>,
    pub(super) hook: &'a Option<String>,
}

impl fmt::Display for RuleTraced<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let RuleTraced {
            family,
            table,
            chain,
            handle,
            rule,
            comment,
            verdict,
            via,
            element,
            hook,
        } = *self;
        let at = hook
            .as_deref()
            .map_or(String::new(), |h| format!(", hook {h}"));
        if rule.is_empty() {
            write!(
                f,
                "nftrace: the {verdict} of chain {chain} (table {family} {table}{at})"
            )?;
        } else {
            write!(
                f,
                "nftrace: rule `{rule}` (table {family} {table}, chain {chain}, handle {handle}{at}) said {verdict}"
            )?;
        }
        if let Some(c) = comment.as_deref().filter(|c| !rule.contains(*c)) {
            write!(f, ", comment \"{c}\"")?;
        }
        if !via.is_empty() {
            write!(f, "; reached by {}", via.join(", "))?;
        }
        if let Some(e) = element {
            write!(f, "; verdict map {} element `{}`", e.map, e.key)?;
            if let Some(c) = &e.comment {
                write!(f, " (comment \"{c}\")")?;
            }
        }
        Ok(())
    }
}
