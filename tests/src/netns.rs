//! Network namespaces owned by a test: created with `ip netns add`, removed
//! (with everything in them) on drop, even when the test panics.

use std::{
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, Result, bail};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short prefix unique to this process and call, so parallel tests and
/// leftovers of killed runs never collide.
pub fn unique_prefix() -> String {
    // The demo names its namespaces readably (and clears its leftovers).
    if let Ok(p) = std::env::var("TRACER_NS_PREFIX") {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        return if n == 0 { p } else { format!("{p}{n}") };
    }
    format!(
        "tt{}x{}",
        std::process::id() % 100_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run a command; fail with the command line and its stderr.
pub fn run(cmd: &[&str]) -> Result<Output> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .with_context(|| format!("spawn {}", cmd.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: String) -> Result<Netns> {
        run(&["ip", "netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip -n NAME ARGS...`
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Run a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Result<Output> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Run a command inside the namespace with `text` in a temporary file
    /// whose path is its last argument (`nft -f`, `iptables-restore`); the
    /// file is removed whatever the command did.
    pub fn exec_file(&self, args: &[&str], text: &str) -> Result<Output> {
        let file = std::env::temp_dir().join(format!("tracer-{}-{}.in", self.name, args[0]));
        std::fs::write(&file, text)?;
        let mut v = args.to_vec();
        v.push(file.to_str().context("temp path")?);
        let r = self.exec(&v);
        let _ = std::fs::remove_file(&file);
        r
    }

    /// Run a command inside the namespace without failing on its exit code.
    pub fn exec_status(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("spawn ip netns exec")
    }

    pub fn sysctl(&self, key: &str, val: &str) -> Result<()> {
        self.exec(&["sysctl", "-qw", &format!("{key}={val}")])?;
        Ok(())
    }

    /// Spawn a background process inside the namespace (killed on drop of
    /// the returned guard).
    pub fn spawn(&self, args: &[&str]) -> Result<Child> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .spawn()
            .with_context(|| format!("spawn {} in {}", args.join(" "), self.name))?;
        Ok(Child(child))
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veths (and their peers).
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A background process killed on drop.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A veth pair `a_dev` in `a` and `b_dev` in `b`, both up.
pub fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<()> {
    a.ip(&[
        "link", "add", a_dev, "type", "veth", "peer", "name", b_dev, "netns", &b.name,
    ])?;
    a.ip(&["link", "set", a_dev, "up"])?;
    b.ip(&["link", "set", b_dev, "up"])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_unique_and_short() {
        let a = unique_prefix();
        let b = unique_prefix();
        assert_ne!(a, b);
        assert!(a.len() <= 12, "{a}");
        assert!(a.starts_with("tt"));
    }

    #[test]
    fn failing_command_reports_itself() {
        let e = run(&["false"]).unwrap_err().to_string();
        assert!(e.contains("`false` failed"), "{e}");
    }
}
