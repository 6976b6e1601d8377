//! Checks `src/dlpack.rs` against the C headers, as `tests/layout.rs` does for
//! `ddpspawn.h`: a generated C program prints what the C compiler makes of
//! `<dlpack/dlpack.h>` (each struct's size and alignment, each field's offset,
//! each constant's value), compared with the Rust declarations; the functions
//! `ddpspawn/ddpspawn_dlpack.h` exports are compared by name with the `pub fn`s
//! of `src/dlpack.rs`, and every `pub const` and `#[repr(C)]` struct there
//! must be among the checked ones.
//!
//! The headers come from `DDPSPAWN_INCLUDE_DIR` (holding
//! `ddpspawn/ddpspawn_dlpack.h`), else the repository's `capi/include`;
//! `<dlpack/dlpack.h>` from the compiler's include path (Debian's
//! libdlpack-dev, which tools/setup installs). The compiler is `$CC`, else
//! `cc`. It never skips.

use ddpspawn_sys::*;
use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fs;
use std::mem::{align_of, size_of, MaybeUninit};
use std::path::PathBuf;
use std::process::Command;
use std::ptr;

const SOURCE: &str = include_str!("../src/dlpack.rs");

fn include_dir() -> PathBuf {
    let dir = match env::var_os("DDPSPAWN_INCLUDE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../capi/include"),
    };
    assert!(
        dir.join("ddpspawn/ddpspawn_dlpack.h").is_file(),
        "no ddpspawn/ddpspawn_dlpack.h in {} (set DDPSPAWN_INCLUDE_DIR)",
        dir.display()
    );
    dir
}

/// Puts a struct's size, alignment and field offsets into `facts`; the
/// exhaustive pattern stops compiling when the struct gains or loses a field
/// that is not listed.
macro_rules! layout {
    ($facts:ident, $ty:ident { $($field:ident),+ $(,)? }) => {{
        let _ = |v: $ty| {
            let $ty { $($field: _),+ } = v;
        };
        let name = stringify!($ty);
        $facts.insert(format!("sizeof {name}"), size_of::<$ty>().to_string());
        $facts.insert(format!("alignof {name}"), align_of::<$ty>().to_string());
        let value = MaybeUninit::<$ty>::uninit();
        let base = value.as_ptr();
        $(
            // SAFETY: addr_of! only computes a field's address; nothing is read.
            let field = unsafe { ptr::addr_of!((*base).$field) };
            $facts.insert(
                format!("offsetof {name}.{}", stringify!($field)),
                (field as usize - base as usize).to_string(),
            );
        )+
    }};
}

/// `KEY VALUE` facts, as the Rust side sees them.
fn rust_facts() -> BTreeMap<String, String> {
    let mut facts = BTreeMap::new();
    layout!(
        facts,
        DLDevice {
            device_type,
            device_id
        }
    );
    layout!(facts, DLDataType { code, bits, lanes });
    layout!(
        facts,
        DLTensor {
            data,
            device,
            ndim,
            dtype,
            shape,
            strides,
            byte_offset
        }
    );
    layout!(
        facts,
        DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter
        }
    );
    let mut put = |key: &str, value: usize| {
        facts.insert(key.to_string(), value.to_string());
    };
    put("value kDLCPU", kDLCPU as usize);
    put("value kDLCUDA", kDLCUDA as usize);
    put("value kDLInt", kDLInt as usize);
    put("value kDLUInt", kDLUInt as usize);
    put("value kDLFloat", kDLFloat as usize);
    put("value kDLBfloat", kDLBfloat as usize);
    put("value kDLBool", kDLBool as usize);
    facts
}

/// The same facts from the C compiler. kDLBool is in DLPack 0.8 and later;
/// an older header (Debian's is 0.6) does not declare it, and the value
/// from the Rust side stands unchecked there.
fn c_facts(rust: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut program = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <dlpack/dlpack.h>\nint main(void) {\n",
    );
    for key in rust.keys() {
        let (what, name) = key.split_once(' ').expect("KEY NAME");
        let expr = match what {
            "sizeof" => format!("sizeof({name})"),
            "alignof" => format!("_Alignof({name})"),
            "offsetof" => {
                let (ty, field) = name.split_once('.').expect("TYPE.FIELD");
                format!("offsetof({ty}, {field})")
            }
            _ => format!("(size_t){name}"),
        };
        let line = format!("  printf(\"{key} %zu\\n\", (size_t)({expr}));\n");
        if name == "kDLBool" {
            program += &format!("#if DLPACK_VERSION >= 80\n{line}#endif\n");
        } else {
            program += &line;
        }
    }
    program += "  return 0;\n}\n";
    // Cargo's own temporary directory for this target, never /tmp.
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dlpack-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let (source, binary) = (dir.join("facts.c"), dir.join("facts"));
    fs::write(&source, program).unwrap();
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = Command::new(&cc)
        .args(["-std=c11", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        built.status.success(),
        "{cc} could not compile against <dlpack/dlpack.h> (install libdlpack-dev): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&binary).output().unwrap();
    fs::remove_dir_all(&dir).unwrap();
    let mut facts: BTreeMap<String, String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').unwrap();
            (key.to_string(), value.to_string())
        })
        .collect();
    facts
        .entry("value kDLBool".to_string())
        .or_insert_with(|| rust["value kDLBool"].clone());
    facts
}

#[test]
fn dlpack_declarations_match_the_c_compiler() {
    let rust = rust_facts();
    assert_eq!(rust, c_facts(&rust));
}

/// Names that follow `prefix` at the start of a (trimmed) line of `text`.
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix(prefix))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_dlpack_function_is_declared() {
    let header = fs::read_to_string(include_dir().join("ddpspawn/ddpspawn_dlpack.h")).unwrap();
    // Each exported function's name is the identifier before its `(`.
    let exported: BTreeSet<String> = header
        .split("DDPSPAWN_EXPORT")
        .skip(1)
        .map(|rest| {
            let before = rest.split('(').next().unwrap().trim_end();
            before
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        exported.contains("ddpspawn_reducer_create_dlpack"),
        "{exported:?}"
    );
    assert_eq!(exported, names_after(SOURCE, "pub fn "));
}

#[test]
fn every_dlpack_declaration_is_checked() {
    let facts = rust_facts();
    let checked = |what: &str| -> BTreeSet<String> {
        facts
            .keys()
            .filter_map(|key| key.strip_prefix(what))
            .map(|name| name.split('.').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(names_after(SOURCE, "pub const "), checked("value "));
    assert_eq!(names_after(SOURCE, "pub struct "), checked("sizeof "));
}
