use std::process::Command;

fn main() {
    // The BPF target links with bpf-linker; tell the developer clearly when
    // it is missing instead of letting rustc fail with a linker error.
    if Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("cargo:warning=bpf-linker not found on PATH: run `cargo xtask setup`");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
