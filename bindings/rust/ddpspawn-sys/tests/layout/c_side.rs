//! The C side of `tests/layout.rs`: finding the header, and the facts the C
//! compiler gives about it (a generated C program, compiled and run).

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::header::{init_macro_for, Header};

/// The header, relative to an include directory.
const HEADER: &str = "ddpspawn/ddpspawn.h";

pub(crate) struct Found {
    pub(crate) header: PathBuf,
    cflags: Vec<String>,
    pub(crate) how: String,
}

pub(crate) fn find_header() -> Found {
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

/// The C program: one line per fact, `KEY VALUE`, keyed like
/// [`RustSide`](crate::rust_side::RustSide).
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
pub(crate) fn c_side(found: &Found, header: &Header) -> BTreeMap<String, String> {
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
