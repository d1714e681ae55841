//! The core's floors import only downward.
//!
//! Every file under src/ belongs to the floor of its top folder, and may
//! name (`crate::<floor>...`, in a `use` or inline) its own floor or one
//! below it:
//!
//! ```text
//!   abi        3   the C ABI
//!   endpoint   2   the endpoint and its parts
//!   shm | net  1   side by side: neither may name the other
//!   sys        0   the ground floor
//! ```
//!
//! shm and net share a rank and stay apart: a TCP connection needs
//! nothing of shared memory, and a queue nothing of the network, so
//! neither sits on the other.  Only lib.rs (the floors and the public API)
//! and fuzzing.rs (the fuzz targets' harness) sit at the crate root; they
//! may name any floor.  A floor names only floors, never the crate root's
//! re-exports (`crate::Endpoint`), and `super::` chains that climb to the
//! root are checked as `crate::` paths are.
//!
//! The C ABI's names (`DOORBELL_*`) appear in code only in the abi floor:
//! the floors below speak in `Error`, not in status codes.

use std::path::{Path, PathBuf};

/// (floor, rank): a floor may name floors of lower rank, and itself.
const FLOORS: [(&str, u32); 5] = [("sys", 0), ("shm", 1), ("net", 1), ("endpoint", 2), ("abi", 3)];
/// Files at src/ itself, which may name any floor.
const ROOT_FILES: [&str; 2] = ["lib.rs", "fuzzing.rs"];

fn rank(floor: &str) -> Option<u32> {
    FLOORS.iter().find(|(f, _)| *f == floor).map(|(_, r)| *r)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The tokens of Rust source that matter here: identifiers, `::` and
/// punctuation.  Comments, string, byte-string, raw-string and character
/// literals are dropped (a path in a comment or a message imports nothing).
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let b = src.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    let mut line = 1;
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let ident_cont = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    // Skips a "..." literal whose opening quote is at `i`; returns the index past it.
    let skip_string = |mut i: usize, line: &mut usize| {
        i += 1;
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' {
                i += 1;
            }
            if i < b.len() && b[i] == b'\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    // Skips r#*"..."#* whose first '#' or '"' is at `i`.
    let skip_raw = |mut i: usize, line: &mut usize| {
        let mut hashes = 0;
        while i < b.len() && b[i] == b'#' {
            hashes += 1;
            i += 1;
        }
        i += 1; // the opening quote
        loop {
            if i >= b.len() {
                return i;
            }
            if b[i] == b'\n' {
                *line += 1;
            }
            if b[i] == b'"' && b[i + 1..].iter().take(hashes).filter(|&&c| c == b'#').count() == hashes {
                return i + 1 + hashes;
            }
            i += 1;
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                loop {
                    if i + 1 >= b.len() {
                        i = b.len();
                        break;
                    }
                    if b[i] == b'/' && b[i + 1] == b'*' {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b[i + 1] == b'/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'"' => i = skip_string(i, &mut line),
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}'), or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    // Multi-byte UTF-8 character literals.
                    let end = src[i + 1..].char_indices().nth(1).map(|(k, _)| i + 1 + k);
                    match end {
                        Some(e) if b.get(e) == Some(&b'\'') => i = e + 1,
                        _ => i += 1,
                    }
                }
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::Path, line));
                i += 2;
            }
            c if ident_start(c) => {
                let start = i;
                while i < b.len() && ident_cont(b[i]) {
                    i += 1;
                }
                let word = &src[start..i];
                let prefix = matches!(word, "r" | "b" | "c" | "br" | "cr");
                if prefix && word.contains('r') && matches!(b.get(i), Some(b'"') | Some(b'#')) {
                    i = skip_raw(i, &mut line);
                } else if prefix && b.get(i) == Some(&b'"') {
                    i = skip_string(i, &mut line);
                } else if word == "b" && b.get(i) == Some(&b'\'') {
                    i += if b.get(i + 1) == Some(&b'\\') { 4 } else { 3 };
                    while i < b.len() && b[i - 1] != b'\'' {
                        i += 1;
                    }
                } else {
                    out.push((Tok::Ident(word.to_string()), line));
                }
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && ident_cont(b[i]) {
                    i += 1;
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            c => {
                out.push((Tok::Punct(c as char), line));
                i += 1;
            }
        }
    }
    out
}

/// The first segments named right after a path prefix at `toks[at..]`:
/// one identifier, or each item of a `{...}` group.
fn first_segments(toks: &[(Tok, usize)], at: usize) -> Vec<(String, usize)> {
    match toks.get(at) {
        Some((Tok::Ident(s), l)) => vec![(s.clone(), *l)],
        Some((Tok::Punct('{'), _)) => {
            let mut out = vec![];
            let mut depth = 0;
            let mut expect = true;
            for (t, l) in &toks[at..] {
                match t {
                    Tok::Punct('{') => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if depth == 1 => expect = true,
                    Tok::Ident(s) if expect && depth == 1 => {
                        out.push((s.clone(), *l));
                        expect = false;
                    }
                    _ => {
                        if depth == 1 {
                            expect = false;
                        }
                    }
                }
            }
            out
        }
        _ => vec![],
    }
}

/// What `rel` (a path under src/, with '/') does wrong: one line each.
fn violations(rel: &str, src: &str) -> Vec<String> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts.len() == 1 {
        return if ROOT_FILES.contains(&rel) {
            vec![]
        } else {
            vec![format!("{rel}: a file at the crate root; put it in a floor (tests/layering.rs)")]
        };
    }
    let floor = parts[0];
    let Some(mine) = rank(floor) else {
        return vec![format!("{rel}: folder `{floor}` is no floor (tests/layering.rs FLOORS)")];
    };
    // Module depth below the crate root: sys/mod.rs is 1, sys/os.rs 2.
    let file = parts[parts.len() - 1];
    let file_depth = parts.len() - usize::from(file == "mod.rs");
    let mut out = vec![];
    if src.contains("#[path") {
        out.push(format!("{rel}: a #[path] attribute hides where a module lives"));
    }
    let check = |name: &str, line: usize, out: &mut Vec<String>| match rank(name) {
        Some(r) if name == floor || r < mine => {}
        Some(_) => out.push(format!("{rel}:{line}: floor `{floor}` names `crate::{name}`, which is not below it")),
        None => out.push(format!("{rel}:{line}: floor `{floor}` names `crate::{name}`; name a floor, not the crate root")),
    };
    let toks = tokens(src);
    // Braces that opened an inline `mod name {`: each adds one module level.
    let mut braces: Vec<bool> = vec![];
    let mut i = 0;
    while i < toks.len() {
        let (t, line) = &toks[i];
        match t {
            Tok::Punct('{') => {
                let is_mod = i >= 2
                    && matches!(&toks[i - 1].0, Tok::Ident(_))
                    && toks[i - 2].0 == Tok::Ident("mod".into());
                braces.push(is_mod);
            }
            Tok::Punct('}') => {
                braces.pop();
            }
            Tok::Ident(s) if s == "crate" && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) => {
                // `$crate::` in a macro is the same crate.
                for (name, l) in first_segments(&toks, i + 2) {
                    check(&name, l, &mut out);
                }
            }
            Tok::Ident(s) if s == "super" && (i == 0 || toks[i - 1].0 != Tok::Path) => {
                let mut n = 0;
                let mut j = i;
                while toks.get(j).map(|t| &t.0) == Some(&Tok::Ident("super".into()))
                    && toks.get(j + 1).map(|t| &t.0) == Some(&Tok::Path)
                {
                    n += 1;
                    j += 2;
                }
                let depth = file_depth + braces.iter().filter(|m| **m).count();
                if n >= depth {
                    for (name, l) in first_segments(&toks, j) {
                        check(&name, l, &mut out);
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            Tok::Ident(s) if s.starts_with("DOORBELL_") && floor != "abi" => {
                out.push(format!("{rel}:{line}: `{s}` is a C ABI name; below the abi floor use Error"));
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_floor_imports_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    assert!(files.len() > 30, "too few files found under {}: {files:?}", src.display());
    let mut bad = vec![];
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_str().unwrap().replace('\\', "/");
        bad.extend(violations(&rel, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(bad.is_empty(), "imports that run up or across the floors:\n  {}", bad.join("\n  "));
}

/// The checker itself: each kind of wrong import is caught, and what only
/// looks like one (comments, strings, downward paths) is not.
#[test]
fn the_checker_catches_upward_imports() {
    let bad = |rel: &str, src: &str| violations(rel, src).len();
    // Down and sideways within a floor: fine.
    assert_eq!(bad("endpoint/peers.rs", "use crate::sys::sync::lock;\nuse crate::shm::queue::Q;\nuse crate::net::tcp::Conn;"), 0);
    assert_eq!(bad("shm/queue.rs", "use crate::shm::bulk::B; fn f() { crate::sys::now_ns(); }"), 0);
    assert_eq!(bad("abi/ffi.rs", "use crate::endpoint::Endpoint; const X: i32 = DOORBELL_ERR_X;"), 0);
    // Up, in a use line, inline, or in a group.
    assert_eq!(bad("shm/queue.rs", "use crate::endpoint::Inner;"), 1);
    assert_eq!(bad("sys/error.rs", "fn f() -> i32 { crate::abi::ffi::code(e) }"), 1);
    assert_eq!(bad("net/tcp.rs", "use crate::{sys::sync::lock, endpoint::config::Config};"), 1);
    assert_eq!(bad("net/tcp.rs", "use crate::{\n    sys::{sync::lock, error::Error},\n    abi::ffi,\n};"), 1);
    // Across: shm and net stay apart.
    assert_eq!(bad("net/tcp.rs", "use crate::shm::segment::Segment;"), 1);
    assert_eq!(bad("shm/queue.rs", "use crate::net::frame;"), 1);
    // Through the crate root's re-exports, or to something that is no floor.
    assert_eq!(bad("net/congestion.rs", "let ep = crate::Endpoint::new(c);"), 1);
    assert_eq!(bad("sys/os.rs", "use crate::fuzzing;"), 1);
    // super:: up to the root and over: from sys/mod.rs one level, from
    // endpoint/path/shm.rs three, one more inside an inline module.
    assert_eq!(bad("sys/mod.rs", "use super::abi::ffi;"), 1);
    assert_eq!(bad("endpoint/path/shm.rs", "use super::super::Inner; use super::super::super::abi::ffi;"), 1);
    assert_eq!(bad("endpoint/path/shm.rs", "mod tests { use super::super::super::Inner; }"), 0);
    assert_eq!(bad("endpoint/path/shm.rs", "mod tests { use super::super::super::super::abi::X; }"), 1);
    assert_eq!(bad("shm/mod.rs", "mod a { mod b { } } use super::endpoint::E;"), 1);
    // C ABI names below the abi floor.
    assert_eq!(bad("endpoint/peers.rs", "fail(task, DOORBELL_ERR_PEER_LOST);"), 1);
    // Comments, doc comments, strings and character literals name nothing.
    let quiet = "// use crate::abi::ffi;\n/// crate::endpoint::Inner\n/* crate::abi /* nested */ crate::abi */\n\
                 fn f() { let _ = \"crate::abi::ffi DOORBELL_ERR_X\"; let _ = r#\"crate::abi\"#; let _ = b\"crate::abi\"; \
                 let _ = c\"crate::abi\"; let _ = '\"'; let _ = b'\"'; }\nfn g<'a>(x: &'a u8) {}";
    assert_eq!(violations("shm/queue.rs", quiet), Vec::<String>::new());
    // Files outside the floors.
    assert_eq!(bad("queue.rs", ""), 1);
    assert_eq!(bad("lib.rs", "pub use abi::X;"), 0);
    assert_eq!(bad("misc/x.rs", ""), 1);
}
