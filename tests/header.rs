//! The committed include/doorbell.h must equal what build.rs generates.

#[test]
fn committed_header_is_current() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/doorbell.h"));
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("git")
        .args(["-C", root, "show", "HEAD:include/doorbell.h"])
        .output()
        .expect("git must be installed to check the committed header");
    assert!(out.status.success(), "include/doorbell.h is not committed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout) == generated,
        "include/doorbell.h in HEAD is stale: rebuild and commit the regenerated header"
    );
}
