//! The sentences of what tracing itself saw and missed: function hooks'
//! reports, hooks that could not attach, events and hops not kept.

use std::fmt;

/// [`super::Evidence::FunctionHook`].
pub(super) fn function(
    f: &mut fmt::Formatter<'_>,
    backend: &str,
    netns: &str,
    detail: &str,
) -> fmt::Result {
    write!(f, "{detail} in netns {netns} [{backend}]")
}

/// [`super::Evidence::EventsLost`].
pub(super) fn events_lost(f: &mut fmt::Formatter<'_>, events: u64) -> fmt::Result {
    write!(
        f,
        "{events} events lost (ring buffer full): timeline may be incomplete"
    )
}

/// [`super::Evidence::MapInsertsFailed`].
pub(super) fn map_inserts_failed(f: &mut fmt::Formatter<'_>, inserts: u64) -> fmt::Result {
    write!(
        f,
        "{inserts} kernel map inserts failed (maps full): some packets could not be followed"
    )
}

/// [`super::Evidence::HooksUnavailable`].
pub(super) fn hooks_unavailable(f: &mut fmt::Formatter<'_>, hooks: &[String]) -> fmt::Result {
    write!(f, "hooks unavailable: {}", hooks.join(", "))
}

/// [`super::Evidence::FuncHookUnavailable`].
pub(super) fn func_hook_unavailable(
    f: &mut fmt::Formatter<'_>,
    hook: &str,
    why: &str,
) -> fmt::Result {
    write!(
        f,
        "hook {hook} unavailable ({why}): its evidence is missing"
    )
}

/// [`super::Evidence::HopsNotKept`].
pub(super) fn hops_not_kept(f: &mut fmt::Formatter<'_>, hops: u32) -> fmt::Result {
    write!(f, "{hops} further hops not kept")
}

/// [`super::Evidence::CountedInKernel`].
pub(super) fn counted_in_kernel(f: &mut fmt::Formatter<'_>, passages: u32) -> fmt::Result {
    write!(
        f,
        "{passages} more hook passages were counted in the kernel, not recorded one by one"
    )
}
