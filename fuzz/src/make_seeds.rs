//! Writes doorbell::fuzzing::seeds() to fuzz/corpus/<target>/<name>.
fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus");
    for (target, name, bytes) in doorbell::fuzzing::seeds() {
        let dir = format!("{root}/{target}");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(format!("{dir}/{name}"), &bytes).unwrap();
        println!("{dir}/{name}: {} bytes", bytes.len());
    }
}
