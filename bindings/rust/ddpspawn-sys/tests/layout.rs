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
//! struct, `pub type` and `pub const` of `src/lib.rs` must be checked here (a
//! struct's field list below must name every field: the pattern stops
//! compiling otherwise). Functions are checked by name: every function the
//! header exports (`DDPSPAWN_EXPORT`) is declared in `src/lib.rs`, and every
//! `pub fn` there is in the header.
//!
//! The header is found through, in this order: the `DDPSPAWN_INCLUDE_DIR`
//! environment variable (a directory holding `ddpspawn/ddpspawn.h`), the
//! repository's `capi/include` next to this crate, `pkg-config --cflags
//! ddpspawn`. The C compiler is `$CC`, else `cc`. Without either the test
//! fails: it never skips.

use ddpspawn_sys::*;
use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::mem::{align_of, size_of, MaybeUninit};
use std::os::raw::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

/// The header, relative to an include directory.
const HEADER: &str = "ddpspawn/ddpspawn.h";

// ---------------------------------------------------------------------------
// The Rust side
// ---------------------------------------------------------------------------

/// How the C program classifies a type: `int` (signed integer), `uint`
/// (unsigned integer), `float` or `ptr` (data or function pointer).
trait Kind {
    const KIND: &'static str;
}

macro_rules! kind {
    ($kind:literal: $($ty:ty),+) => {
        $(impl Kind for $ty {
            const KIND: &'static str = $kind;
        })+
    };
}

kind!("int": i8, i16, i32, i64, isize);
kind!("uint": u8, u16, u32, u64, usize);
kind!("float": f32, f64);
// The header's function-pointer typedefs (nullable, hence `Option`).
kind!("ptr": Option<unsafe extern "C" fn()>, Option<unsafe extern "C" fn(i32, *mut c_void) -> c_int>);
// ddpspawn_comm_hook's callbacks.
kind!("ptr":
    Option<unsafe extern "C" fn(*mut c_void, *mut ddpspawn_context, *const ddpspawn_bucket,
                                *mut *mut c_void) -> ddpspawn_status>,
    Option<unsafe extern "C" fn(*mut c_void, *mut ddpspawn_context, *mut c_void)
                                -> ddpspawn_status>,
    Option<unsafe extern "C" fn(*mut c_void)>);

impl<T> Kind for *const T {
    const KIND: &'static str = "ptr";
}

impl<T> Kind for *mut T {
    const KIND: &'static str = "ptr";
}

fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

fn pointee_kind<T: Kind>(_: *const T) -> &'static str {
    T::KIND
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The facts about the Rust declarations, keyed like the C program's output
/// (`"struct NAME"`, `"field NAME.FIELD"`, ...), and the names of the
/// `*_INIT` constants that were compared.
struct RustSide {
    facts: BTreeMap<String, String>,
    init_consts: Vec<&'static str>,
}

/// A struct with a body: its size and alignment, and each field's offset,
/// size and kind (alone for a struct without a `*_INIT` macro, which the
/// library or the caller fills whole). The field list must name every field
/// of the Rust struct.
macro_rules! layout_struct {
    ($side:ident, $ty:ident { $($field:ident),+ $(,)? }) => {{
        let _ = |v: $ty| {
            let $ty { $($field: _),+ } = v;
        };
        let name = stringify!($ty);
        $side.facts.insert(
            format!("struct {name}"),
            format!("size={} align={}", size_of::<$ty>(), align_of::<$ty>()),
        );
        let value = MaybeUninit::<$ty>::uninit();
        let base = value.as_ptr();
        $(
            // SAFETY: addr_of! only computes the address of a field inside
            // `value`; nothing is read.
            let field = unsafe { ptr::addr_of!((*base).$field) };
            $side.facts.insert(
                format!("field {name}.{}", stringify!($field)),
                format!(
                    "offset={} size={} kind={}",
                    field as usize - base as usize,
                    pointee_size(field),
                    pointee_kind(field),
                ),
            );
        )+
    }};
}

/// A struct with a body and its `*_INIT` constant: `layout_struct!`'s facts,
/// and the bytes of each field of the constant.
macro_rules! full_struct {
    ($side:ident, $ty:ident { $($field:ident),+ $(,)? }, $init:ident) => {{
        layout_struct!($side, $ty { $($field),+ });
        let name = stringify!($ty);
        let init: $ty = $init;
        $(
            let field = ptr::addr_of!(init.$field);
            // SAFETY: the bytes of one initialized field of `init` (no
            // padding is read).
            let bytes =
                unsafe { std::slice::from_raw_parts(field.cast::<u8>(), pointee_size(field)) };
            $side
                .facts
                .insert(format!("init {name}.{}", stringify!($field)), hex(bytes));
        )+
        $side.init_consts.push(stringify!($init));
    }};
}

/// An opaque handle: the header declares it without a body, Rust as a
/// zero-sized type.
macro_rules! opaque_struct {
    ($side:ident, $($ty:ident),+ $(,)?) => {
        $($side.facts.insert(
            format!("opaque {}", stringify!($ty)),
            match size_of::<$ty>() {
                0 => "no body".to_string(),
                n => format!("size={n}"),
            },
        );)+
    };
}

macro_rules! typedefs {
    ($side:ident, $($ty:ident),+ $(,)?) => {
        $($side.facts.insert(
            format!("typedef {}", stringify!($ty)),
            format!("size={} kind={}", size_of::<$ty>(), <$ty as Kind>::KIND),
        );)+
    };
}

macro_rules! defines {
    ($side:ident, $($name:ident),+ $(,)?) => {
        $($side.facts.insert(format!("define {}", stringify!($name)), i64::from($name).to_string());)+
    };
}

fn rust_side() -> RustSide {
    let mut side = RustSide {
        facts: BTreeMap::new(),
        init_consts: Vec::new(),
    };

    full_struct!(
        side,
        ddpspawn_launch_options {
            struct_size,
            nprocs,
            start_method,
            argv,
            env,
            worker_fn,
            user_data,
            before_fork,
            after_fork_parent,
            after_fork_child,
            timeout_s,
            grace_period_s,
            master_addr,
            master_port,
            unused0,
            nnodes,
            node_rank,
            max_restarts,
            unused1,
        },
        DDPSPAWN_LAUNCH_OPTIONS_INIT
    );
    full_struct!(
        side,
        ddpspawn_rank_report {
            struct_size,
            state,
            exit_code,
            signal,
            pid,
            stopped_by_launcher,
        },
        DDPSPAWN_RANK_REPORT_INIT
    );
    full_struct!(
        side,
        ddpspawn_context_options {
            struct_size,
            backend,
            timeout_s,
        },
        DDPSPAWN_CONTEXT_OPTIONS_INIT
    );
    full_struct!(
        side,
        ddpspawn_reducer_options {
            struct_size,
            bucket_cap_mb,
            first_bucket_cap_mb,
            comm_hook,
            powersgd_rank,
            powersgd_start_iteration,
            find_unused_parameters,
            custom_comm_hook,
        },
        DDPSPAWN_REDUCER_OPTIONS_INIT
    );
    layout_struct!(
        side,
        ddpspawn_bucket {
            struct_size,
            index,
            bucket_count,
            dtype,
            data,
            count,
        }
    );
    layout_struct!(
        side,
        ddpspawn_comm_hook {
            struct_size,
            user_data,
            start,
            wait,
            release,
        }
    );
    opaque_struct!(
        side,
        ddpspawn_job,
        ddpspawn_context,
        ddpspawn_reducer,
        ddpspawn_run_result,
    );
    typedefs!(
        side,
        ddpspawn_status,
        ddpspawn_worker_fn,
        ddpspawn_fork_hook
    );
    defines!(
        side,
        DDPSPAWN_ABI_VERSION,
        DDPSPAWN_OK,
        DDPSPAWN_ERR_INVALID_ARGUMENT,
        DDPSPAWN_ERR_WORKER_FAILED,
        DDPSPAWN_ERR_TIMEOUT,
        DDPSPAWN_ERR_INTERRUPTED,
        DDPSPAWN_ERR_UNAVAILABLE,
        DDPSPAWN_ERR_FAILED_PRECONDITION,
        DDPSPAWN_ERR_INTERNAL,
        DDPSPAWN_RANK_NOT_STARTED,
        DDPSPAWN_RANK_RUNNING,
        DDPSPAWN_RANK_EXITED,
        DDPSPAWN_RANK_SIGNALED,
        DDPSPAWN_FLOAT32,
        DDPSPAWN_FLOAT64,
        DDPSPAWN_INT32,
        DDPSPAWN_INT64,
        DDPSPAWN_SUM,
        DDPSPAWN_MEAN,
        DDPSPAWN_MIN,
        DDPSPAWN_MAX,
        DDPSPAWN_PRODUCT,
    );
    side
}

/// Names declared in this crate's source: `#[repr(C)]` structs, `pub type`s
/// and `pub const`s (a plain text scan; the crate's style is one item per
/// line).
struct SourceNames {
    repr_c_structs: BTreeSet<String>,
    types: BTreeSet<String>,
    consts: BTreeSet<String>,
    /// `pub fn`s: the declarations in the `extern "C"` block.
    functions: BTreeSet<String>,
}

fn source_names() -> SourceNames {
    let source = include_str!("../src/lib.rs");
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = SourceNames {
        repr_c_structs: BTreeSet::new(),
        types: BTreeSet::new(),
        consts: BTreeSet::new(),
        functions: BTreeSet::new(),
    };
    let mut repr_c = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[repr(C") {
            repr_c = true;
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            if repr_c {
                names.repr_c_structs.insert(ident(rest));
            }
            repr_c = false;
        } else if let Some(rest) = line.strip_prefix("pub type ") {
            names.types.insert(ident(rest));
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            names.consts.insert(ident(rest));
        } else if let Some(rest) = line.strip_prefix("pub fn ") {
            names.functions.insert(ident(rest));
        } else if !line.starts_with("#[") && !line.starts_with("//") {
            repr_c = false;
        }
    }
    names
}

// ---------------------------------------------------------------------------
// The header
// ---------------------------------------------------------------------------

/// What the header declares, as far as the C program needs to know.
#[derive(Default, Debug)]
struct Header {
    /// Structs with a body: typedef name and field names in order.
    structs: Vec<(String, Vec<String>)>,
    /// Structs declared without a body (opaque handles).
    opaque: Vec<String>,
    /// Other typedefs (scalars, function pointers).
    typedefs: Vec<String>,
    /// Object-like macros with an integer value.
    defines: Vec<String>,
    /// Object-like macros with a braced initializer (`*_INIT`).
    init_macros: Vec<String>,
    /// Exported functions (`DDPSPAWN_EXPORT`), by name.
    functions: Vec<String>,
    /// What the parser could not handle: a failure, so that a new kind of
    /// declaration gets a check here rather than none.
    problems: Vec<String>,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |i| i + 2);
            // Keep line structure for the #define scan.
            out.extend(after[..end].chars().filter(|&c| c == '\n'));
            out.push(' ');
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = &after[after.find('\n').unwrap_or(after.len())..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The declared name in a declaration such as `const char* name`,
/// `int (*name)(void)` or `int name[4]`.
fn declared_name(decl: &str) -> Option<String> {
    let decl = decl.trim();
    let tail = match decl.find("(*") {
        Some(i) => {
            let after = decl[i + 2..].trim_start();
            let name: String = after.chars().take_while(|&c| is_ident_char(c)).collect();
            return (!name.is_empty()).then_some(name);
        }
        None => decl.split('[').next().unwrap_or("").trim_end(),
    };
    let start = tail.rfind(|c: char| !is_ident_char(c)).map_or(0, |i| i + 1);
    let name = &tail[start..];
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then(|| name.to_string())
}

fn parse_header(text: &str) -> Header {
    let mut header = Header::default();
    let text = strip_comments(text).replace("\\\n", " ");

    // Object-like macros.
    for line in text.lines() {
        // (No let-else: this crate's rust-version is 1.63.)
        let rest = match line.trim_start().strip_prefix('#') {
            Some(rest) => rest,
            None => continue,
        };
        let rest = match rest.trim_start().strip_prefix("define") {
            Some(rest) => rest,
            None => continue,
        };
        let rest = rest.trim_start();
        let name: String = rest.chars().take_while(|&c| is_ident_char(c)).collect();
        let after = &rest[name.len()..];
        let value = after.trim();
        if !name.starts_with("DDPSPAWN_") || value.is_empty() || name == "DDPSPAWN_EXPORT" {
            // Include guard, export attribute: nothing to mirror.
            continue;
        }
        if after.starts_with('(') {
            header.problems.push(format!(
                "function-like macro {name}: not checked by tests/layout.rs"
            ));
        } else if value.starts_with('{') {
            header.init_macros.push(name);
        } else if value.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '(') {
            header.defines.push(name);
        } else {
            header.problems.push(format!(
                "#define {name} {value}: not an integer or an initializer; teach tests/layout.rs to check it"
            ));
        }
    }

    // Typedefs: each `typedef ... ;` outside the preprocessor lines.
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut search = 0;
    while let Some(found) = code[search..].find("typedef") {
        let start = search + found;
        let boundary_before = code[..start]
            .chars()
            .next_back()
            .map_or(true, |c| !is_ident_char(c));
        let boundary_after = code[start + 7..]
            .chars()
            .next()
            .map_or(false, |c| !is_ident_char(c));
        search = start + 7;
        if !boundary_before || !boundary_after {
            continue;
        }
        // The statement ends at the first ';' outside braces.
        let mut depth = 0i32;
        let mut end = None;
        for (i, c) in code[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    end = Some(start + i);
                    break;
                }
                _ => {}
            }
        }
        let end = match end {
            Some(end) => end,
            None => {
                header.problems.push("unterminated typedef".to_string());
                break;
            }
        };
        let statement = code[start + 7..end].trim();
        search = end + 1;
        parse_typedef(statement, &mut header);
    }

    // Functions: `DDPSPAWN_EXPORT <return type> name(...)`.
    const EXPORT: &str = "DDPSPAWN_EXPORT";
    for (start, _) in code.match_indices(EXPORT) {
        let rest = &code[start + EXPORT.len()..];
        let name = match rest.find('(') {
            Some(open) => declared_name(&rest[..open]),
            None => None,
        };
        match name {
            Some(name) => header.functions.push(name),
            None => header.problems.push(format!(
                "cannot read the function after {EXPORT}: `{}`",
                rest.lines().next().unwrap_or("").trim()
            )),
        }
    }
    header
}

fn parse_typedef(statement: &str, header: &mut Header) {
    let rest = match statement.strip_prefix("struct") {
        Some(rest) => rest,
        None => {
            match declared_name(statement) {
                Some(name) => header.typedefs.push(name),
                None => header
                    .problems
                    .push(format!("cannot read typedef {statement}")),
            }
            return;
        }
    };
    match (rest.find('{'), rest.rfind('}')) {
        (Some(open), Some(close)) => {
            let name = rest[close + 1..].trim().to_string();
            let mut fields = Vec::new();
            for decl in rest[open + 1..close].split(';').map(str::trim) {
                if decl.is_empty() {
                    continue;
                }
                if decl.contains('{') || decl.contains(':') {
                    header.problems.push(format!(
                        "{name}: nested struct or bit-field `{decl}` not checked by tests/layout.rs"
                    ));
                    continue;
                }
                match declared_name(decl) {
                    Some(field) => fields.push(field),
                    None => header
                        .problems
                        .push(format!("{name}: cannot read field `{decl}`")),
                }
            }
            header.structs.push((name, fields));
        }
        _ => match declared_name(rest) {
            Some(name) => header.opaque.push(name),
            None => header
                .problems
                .push(format!("cannot read typedef struct{rest}")),
        },
    }
}

/// `DDPSPAWN_LAUNCH_OPTIONS_INIT` for `ddpspawn_launch_options`.
fn init_macro_for(struct_name: &str) -> String {
    let base = struct_name.strip_prefix("ddpspawn_").unwrap_or(struct_name);
    format!("DDPSPAWN_{}_INIT", base.to_ascii_uppercase())
}

// ---------------------------------------------------------------------------
// Finding the header and running the C compiler
// ---------------------------------------------------------------------------

struct Found {
    header: PathBuf,
    cflags: Vec<String>,
    how: String,
}

fn find_header() -> Found {
    let mut tried = Vec::new();

    if let Some(dir) = env::var_os("DDPSPAWN_INCLUDE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        let header = dir.join(HEADER);
        assert!(
            header.is_file(),
            "\n\nDDPSPAWN_INCLUDE_DIR={} has no {HEADER}: set it to the directory that holds \
             ddpspawn/ddpspawn.h (e.g. capi/include in the repository).\n\n",
            dir.display()
        );
        return Found {
            header,
            cflags: vec![format!("-I{}", dir.display())],
            how: format!("DDPSPAWN_INCLUDE_DIR={}", dir.display()),
        };
    }
    tried.push("DDPSPAWN_INCLUDE_DIR: not set".to_string());

    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../capi/include");
    if repo.join(HEADER).is_file() {
        return Found {
            header: repo.join(HEADER),
            cflags: vec![format!("-I{}", repo.display())],
            how: format!("the repository's {}", repo.display()),
        };
    }
    tried.push(format!("{}: no {HEADER}", repo.display()));

    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    match Command::new(&program)
        .args(["--cflags", "ddpspawn"])
        .output()
    {
        Ok(out) if out.status.success() => {
            let flags = String::from_utf8_lossy(&out.stdout);
            let cflags: Vec<String> = flags.split_whitespace().map(str::to_string).collect();
            let mut dirs: Vec<PathBuf> = cflags
                .iter()
                .filter_map(|f| f.strip_prefix("-I"))
                .map(PathBuf::from)
                .collect();
            dirs.push("/usr/local/include".into());
            dirs.push("/usr/include".into());
            if let Some(dir) = dirs.iter().find(|d| d.join(HEADER).is_file()) {
                return Found {
                    header: dir.join(HEADER),
                    cflags,
                    how: format!("pkg-config --cflags ddpspawn ({})", dir.display()),
                };
            }
            tried.push(format!(
                "{program} --cflags ddpspawn: `{}`, and none of {dirs:?} has {HEADER}",
                flags.trim()
            ));
        }
        Ok(out) => tried.push(format!(
            "{program} --cflags ddpspawn: {} ({})",
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        )),
        Err(e) => tried.push(format!("{program}: {e}")),
    }

    panic!(
        "\n\nThe layout test needs the C header {HEADER} and did not find it:\n  {}\n\
         Set DDPSPAWN_INCLUDE_DIR to the directory that holds ddpspawn/ddpspawn.h.\n\n",
        tried.join("\n  ")
    );
}

/// The C program: one line per fact, `KEY VALUE`, keyed like [`RustSide`].
fn c_program(header: &Header) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n\
         #include <stdio.h>\n\
         #include <ddpspawn/ddpspawn.h>\n\
         \n\
         #define KIND(x) _Generic((x), \\\n  \
           char: ((char)-1 < 0 ? \"int\" : \"uint\"), signed char: \"int\", short: \"int\", \\\n  \
           int: \"int\", long: \"int\", long long: \"int\", _Bool: \"uint\", \\\n  \
           unsigned char: \"uint\", unsigned short: \"uint\", unsigned int: \"uint\", \\\n  \
           unsigned long: \"uint\", unsigned long long: \"uint\", \\\n  \
           float: \"float\", double: \"float\", long double: \"float\", default: \"ptr\")\n\
         \n\
         static void hex(const char* key, const void* data, size_t size) {\n  \
           const unsigned char* bytes = (const unsigned char*)data;\n  \
           printf(\"%s \", key);\n  \
           for (size_t i = 0; i < size; i++) printf(\"%02x\", bytes[i]);\n  \
           printf(\"\\n\");\n\
         }\n\
         \n\
         int main(void) {\n",
    );
    for (name, fields) in &header.structs {
        let _ = writeln!(
            c,
            "  printf(\"struct {name} size=%zu align=%zu\\n\", sizeof({name}), _Alignof({name}));"
        );
        for field in fields {
            let _ = writeln!(
                c,
                "  printf(\"field {name}.{field} offset=%zu size=%zu kind=%s\\n\", \
                 offsetof({name}, {field}), sizeof((({name}*)0)->{field}), KIND((({name}*)0)->{field}));"
            );
        }
        let init = init_macro_for(name);
        if header.init_macros.contains(&init) {
            let _ = writeln!(c, "  {{\n    {name} v = {init};");
            for field in fields {
                let _ = writeln!(
                    c,
                    "    hex(\"init {name}.{field}\", &v.{field}, sizeof v.{field});"
                );
            }
            let _ = writeln!(c, "  }}");
        }
    }
    for name in &header.typedefs {
        let _ = writeln!(
            c,
            "  printf(\"typedef {name} size=%zu kind=%s\\n\", sizeof({name}), KIND(*({name}*)0));"
        );
    }
    for name in &header.defines {
        let _ = writeln!(
            c,
            "  printf(\"define {name} %lld\\n\", (long long)({name}));"
        );
    }
    c.push_str("  return 0;\n}\n");
    c
}

/// Compiles and runs the C program; its facts.
fn c_side(found: &Found, header: &Header) -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("layout-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let source = dir.join("layout.c");
    let exe = dir.join("layout");
    fs::write(&source, c_program(header))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", source.display()));

    let cc = env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".to_string());
    let out = Command::new(&cc)
        .arg("-std=c11")
        .arg("-Wall")
        .args(&found.cflags)
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "\n\nThe layout test needs a C compiler and could not run `{cc}`: {e}.\n\
                 Install one (e.g. gcc) or set CC.\n\n"
            )
        });
    assert!(
        out.status.success(),
        "\n\n`{cc}` could not compile {} against {} ({}):\n{}\n",
        source.display(),
        found.header.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        exe.display(),
        out.status
    );
    let _ = fs::remove_dir_all(&dir);

    let mut facts = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(what), Some(name), Some(value)) => {
                facts.insert(format!("{what} {name}"), value.to_string());
            }
            _ => panic!("unexpected line from the C program: {line:?}"),
        }
    }
    facts
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

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
            "{name}: exported by the header, not declared in src/lib.rs"
        ));
    }
    for name in in_rust.difference(&in_header) {
        problems.push(format!("{name}: declared in src/lib.rs, not in the header"));
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
                "{what} {name} is declared in src/lib.rs but not checked"
            ));
        }
        for name in checked.difference(declared) {
            problems.push(format!(
                "{what} {name} is checked but not found in src/lib.rs"
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
