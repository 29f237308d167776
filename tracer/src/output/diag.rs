//! One-line messages on stderr: progress, notes, warnings. stdout carries
//! only flows and the summary.
#![allow(clippy::print_stderr, reason = "the one place that writes diagnostics")]

/// `tracer: MSG`
pub fn info(msg: &str) {
    eprintln!("tracer: {msg}");
}

/// `tracer: note: MSG`
pub fn note(msg: &str) {
    eprintln!("tracer: note: {msg}");
}

/// `tracer: warning: MSG`
pub fn warn(msg: &str) {
    eprintln!("tracer: warning: {msg}");
}

/// `tracer: error: MSG`: the one line a failed command prints.
pub fn error(msg: &str) {
    eprintln!("tracer: error: {msg}");
}
