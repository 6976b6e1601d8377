//! Checks this crate's declarations against the C header itself, never against
//! numbers typed in by hand: the test reads `ddpspawn/ddpspawn.h`, generates a
//! C program that prints what the C compiler makes of it (each struct's size
//! and alignment; each field's offset, size and kind of type; the bytes of
//! each `*_INIT` macro's fields; the value of each integer `#define`; each
//! scalar typedef's size and kind), compiles and runs it, and compares the
//! output with the same facts computed from the Rust declarations.
//!
//! Coverage is checked both ways: every struct, field, typedef and constant of
//! the header must have its Rust counterpart here, and every `#[repr(C)]`
//! struct, `pub type` and `pub const` of `src/lib.rs` and `src/types.rs` must
//! be checked here (a struct's field list in `layout/rust_side.rs` must name
//! every field: the pattern stops compiling otherwise). Functions are checked
//! by name: every function the header exports (`DDPSPAWN_EXPORT`) is declared
//! in `src/functions.rs`, and every `pub fn` there is in the header.
//!
//! The header is found through, in this order: the `DDPSPAWN_INCLUDE_DIR`
//! environment variable (a directory holding `ddpspawn/ddpspawn.h`), the
//! repository's `capi/include` next to this crate, `pkg-config --cflags
//! ddpspawn`. The C compiler is `$CC`, else `cc`. Without either the test
//! fails: it never skips.
//!
//! The parts: `layout/rust_side.rs` (the Rust declarations' facts and the
//! names in the source), `layout/header.rs` (reading the header) and
//! `layout/c_side.rs` (finding the header, the C program); the tests are here.

#[path = "layout/c_side.rs"]
mod c_side;
#[path = "layout/header.rs"]
mod header;
#[path = "layout/rust_side.rs"]
mod rust_side;

use std::collections::BTreeSet;
use std::fs;

use c_side::{c_side, find_header};
use header::{init_macro_for, parse_header};
use rust_side::{rust_side, source_names};

/// Every struct, field, typedef and constant of the header against the Rust
/// declarations, as the C compiler lays them out on this target.
#[test]
fn declarations_match_the_header() {
    let found = find_header();
    let text = fs::read_to_string(&found.header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", found.header.display()));
    let header = parse_header(&text);

    let mut c = c_side(&found, &header);
    for name in &header.opaque {
        c.insert(format!("opaque {name}"), "no body".to_string());
    }
    let rust = rust_side().facts;

    let mut problems = header.problems.clone();
    for init in &header.init_macros {
        if !header
            .structs
            .iter()
            .any(|(s, _)| init_macro_for(s) == *init)
        {
            problems.push(format!(
                "{init}: no struct of the header has this name's INIT macro"
            ));
        }
    }
    let keys: BTreeSet<&String> = c.keys().chain(rust.keys()).collect();
    for key in keys {
        match (c.get(key), rust.get(key)) {
            (Some(cv), Some(rv)) if cv == rv => {}
            (Some(cv), Some(rv)) => problems.push(format!("{key}: header {cv}, Rust {rv}")),
            (Some(cv), None) => problems.push(format!(
                "{key}: in the header ({cv}), not checked against Rust (missing in ddpspawn-sys or in tests/layout.rs)"
            )),
            (None, Some(rv)) => {
                problems.push(format!("{key}: in Rust ({rv}), not in the header"))
            }
            (None, None) => unreachable!(),
        }
    }
    assert!(
        problems.is_empty(),
        "\n\nddpspawn-sys does not match {} (found through {}):\n  {}\n\n",
        found.header.display(),
        found.how,
        problems.join("\n  ")
    );
    println!(
        "{} facts match {} (found through {})",
        c.len(),
        found.header.display(),
        found.how
    );
}

/// Every function the header exports is declared in the crate, and every
/// function the crate declares is in the header (names only: the C compiler
/// cannot print a signature; the crate's unit tests call each function).
#[test]
fn every_function_is_declared() {
    let found = find_header();
    let text = fs::read_to_string(&found.header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", found.header.display()));
    let header = parse_header(&text);
    assert!(header.problems.is_empty(), "{}", header.problems.join("\n"));
    let in_header: BTreeSet<String> = header.functions.iter().cloned().collect();
    assert!(
        in_header.len() > 40 && in_header.contains("ddpspawn_job_create"),
        "the header's functions were not found: {in_header:?}"
    );
    let in_rust = source_names().functions;
    let mut problems = Vec::new();
    for name in in_header.difference(&in_rust) {
        problems.push(format!(
            "{name}: exported by the header, not declared in src/functions.rs"
        ));
    }
    for name in in_rust.difference(&in_header) {
        problems.push(format!(
            "{name}: declared in src/functions.rs, not in the header"
        ));
    }
    assert!(
        problems.is_empty(),
        "\n\nddpspawn-sys's functions do not match {} (found through {}):\n  {}\n\n",
        found.header.display(),
        found.how,
        problems.join("\n  ")
    );
    println!(
        "{} functions match {} (found through {})",
        in_header.len(),
        found.header.display(),
        found.how
    );
}

/// Every `#[repr(C)]` struct, `pub type` and `pub const` of the crate is
/// among the declarations compared above.
#[test]
fn every_declaration_is_checked() {
    let side = rust_side();
    let names = source_names();
    let checked = |prefixes: &[&str]| -> BTreeSet<String> {
        side.facts
            .keys()
            .filter_map(|k| {
                let (what, name) = k.split_once(' ')?;
                prefixes
                    .contains(&what)
                    .then(|| name.split('.').next().unwrap_or(name).to_string())
            })
            .collect()
    };
    let mut problems = Vec::new();
    let mut compare = |what: &str, declared: &BTreeSet<String>, checked: BTreeSet<String>| {
        for name in declared.difference(&checked) {
            problems.push(format!(
                "{what} {name} is declared in src/lib.rs or src/types.rs but not checked"
            ));
        }
        for name in checked.difference(declared) {
            problems.push(format!(
                "{what} {name} is checked but not found in src/lib.rs or src/types.rs"
            ));
        }
    };
    compare(
        "#[repr(C)] struct",
        &names.repr_c_structs,
        checked(&["struct", "opaque"]),
    );
    compare("pub type", &names.types, checked(&["typedef"]));
    let mut consts = checked(&["define"]);
    consts.extend(side.init_consts.iter().map(|s| s.to_string()));
    compare("pub const", &names.consts, consts);
    assert!(
        problems.is_empty(),
        "\n\ntests/layout.rs does not cover ddpspawn-sys:\n  {}\n\n",
        problems.join("\n  ")
    );
}
