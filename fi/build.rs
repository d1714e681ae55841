//! Bindings to the vendored libfabric 1.17 headers (fi/include), and the
//! link to libfabric itself (fi_version, fi_param_*).

use std::path::PathBuf;

/// Flags and caps are 64-bit masks, error numbers are ints.
#[derive(Debug)]
struct MacroTypes;

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        let errno = name.starts_with("FI_E") && name != "FI_EVENT";
        Some(if errno { IntKind::I32 } else { IntKind::U64 })
    }
}

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let include = here.join("include");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=include");
    let bindings = bindgen::Builder::default()
        .header(here.join("wrapper.h").to_string_lossy())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .allowlist_function("fi_version|fi_param_define|fi_param_get|fi_log|fi_log_enabled")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .parse_callbacks(Box::new(MacroTypes))
        .generate()
        .expect("bindgen over fi/include");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    bindings.write_to_file(out.join("bindings.rs")).expect("write bindings");
    println!("cargo:rustc-link-lib=dylib=fabric");
}
