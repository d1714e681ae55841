//! The C ABI: the `doorbell_*` functions, constants and status codes of
//! include/doorbell.h (ffi.rs).  The only floor that knows the numeric
//! codes; Rust callers use `Endpoint` instead.

pub(crate) mod ffi;
