//! The committed include/doorbell.h, and the copy in the tree that C builds
//! use, must equal what build.rs generates (`make header` copies it there).

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
        "include/doorbell.h in HEAD is stale: run `make header` and commit it"
    );
    let tree = std::fs::read_to_string(format!("{root}/include/doorbell.h")).unwrap_or_default();
    assert!(tree == generated, "include/doorbell.h in the tree is stale: run `make header`");
}

/// Every macro the generated header defines must expand to something a C
/// compiler accepts: cbindgen once exported a constant whose expression
/// named an item the header leaves out (`QUEUE_HEADER_BYTES`, built from
/// `MAX_TASKS`), so any C file that used it failed to compile.
#[test]
fn every_header_macro_compiles_in_c() {
    let header = include_str!(concat!(env!("OUT_DIR"), "/doorbell.h"));
    let names: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|name| !name.ends_with("_H") && !name.contains('('))
        .collect();
    assert!(names.len() > 10, "too few macros found: {names:?}");
    let dir = std::env::temp_dir().join(format!("doorbell-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("doorbell.h"), header).unwrap();
    let mut c = String::from("#include \"doorbell.h\"\nunsigned long long use_all(void) {\n  unsigned long long s = 0;\n");
    for n in &names {
        c.push_str(&format!("  s += (unsigned long long)({n});\n"));
    }
    c.push_str("  return s;\n}\n");
    std::fs::write(dir.join("use.c"), c).unwrap();
    let out = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-c", "-o"])
        .arg(dir.join("use.o"))
        .arg(dir.join("use.c"))
        .current_dir(&dir)
        .output()
        .expect("a C compiler (cc) must be installed to check the header");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "a header macro does not compile:\n{}", String::from_utf8_lossy(&out.stderr));
}
