//! Generates the C header from src/abi/ffi.rs into cargo's OUT_DIR.  A build
//! never writes the source tree: `make header` copies it to
//! include/doorbell.h, and tests/header.rs fails while the committed copy
//! differs from it.

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
}
