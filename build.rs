//! Generates include/doorbell.h from src/abi/ffi.rs, so the header never drifts
//! from the code (tests/header.rs checks the committed copy is current).

fn main() {
    // cbindgen reads the whole crate (a `pub const` in any module can land
    // in the header), so any change under src/ regenerates it.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let header = cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("generate doorbell.h");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("doorbell.h");
    header.write_to_file(&out);
    // Keep the committed header current, except where the source tree is
    // read-only (a packaged build): then only OUT_DIR has it.
    let target = format!("{dir}/include/doorbell.h");
    let new = std::fs::read(&out).unwrap();
    if std::fs::read(&target).ok().as_deref() != Some(&new[..]) {
        let _ = std::fs::write(&target, &new);
    }
}
