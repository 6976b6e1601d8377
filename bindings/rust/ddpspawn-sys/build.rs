// Build script for ddpspawn-sys: finds libddpspawn.so.1 and builds its path
// into the crate (DDPSPAWN_SYS_LIBRARY, read by src/loader.rs), which loads it
// at the first call. Nothing is linked: a program that depends on these crates
// needs neither an rpath nor a build script of its own.
//
// Order: the DDPSPAWN_LIB_DIR environment variable (a directory holding
// libddpspawn.so.1), then the `-L` directories of `pkg-config --libs
// ddpspawn`, else a build error that says what to set.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB_FILE: &str = "libddpspawn.so.1";

fn main() {
    println!("cargo:rerun-if-env-changed=DDPSPAWN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");

    // docs.rs has no libddpspawn; documentation loads nothing.
    if env::var_os("DOCS_RS").is_some() {
        println!("cargo:rustc-env=DDPSPAWN_SYS_LIBRARY=");
        return;
    }

    let library = if let Some(dir) = env::var_os("DDPSPAWN_LIB_DIR").filter(|d| !d.is_empty()) {
        library_in(Path::new(&dir)).unwrap_or_else(|why| {
            panic!(
                "\n\nddpspawn-sys: DDPSPAWN_LIB_DIR={} cannot be used: {why}.\n\
                 Set it to the directory holding {LIB_FILE}.\n\n",
                Path::new(&dir).display()
            )
        })
    } else {
        pkg_config_library().unwrap_or_else(|why| {
            panic!(
                "\n\nddpspawn-sys: cannot find the ddpspawn C library.\n\
                 Set DDPSPAWN_LIB_DIR to the directory holding {LIB_FILE}, e.g.\n    \
                 DDPSPAWN_LIB_DIR=/path/to/lib cargo build\n\
                 or install ddpspawn with a pkg-config file (ddpspawn.pc; tools/install) \
                 and set PKG_CONFIG_PATH.\n\
                 (pkg-config --libs ddpspawn: {why})\n\n"
            )
        })
    };
    println!("cargo:rustc-env=DDPSPAWN_SYS_LIBRARY={}", library.display());
}

/// `dir`'s libddpspawn.so.1, as an absolute path.
fn library_in(dir: &Path) -> Result<PathBuf, String> {
    let abs = dir.canonicalize().map_err(|e| e.to_string())?;
    let library = abs.join(LIB_FILE);
    if library.is_file() {
        Ok(library)
    } else {
        Err(format!("{} has no {LIB_FILE}", abs.display()))
    }
}

/// The first `-L` directory of `pkg-config --libs ddpspawn` that holds the
/// library.
fn pkg_config_library() -> Result<PathBuf, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program)
        .args(["--libs", "ddpspawn"])
        .output()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} ({})", stderr.trim(), out.status));
    }
    let flags = String::from_utf8(out.stdout).map_err(|_| "output is not UTF-8".to_string())?;
    let mut tried = Vec::new();
    let mut tokens = flags.split_whitespace();
    while let Some(token) = tokens.next() {
        if let Some(rest) = token.strip_prefix("-L") {
            let dir = if rest.is_empty() {
                tokens.next().unwrap_or("")
            } else {
                rest
            };
            match library_in(Path::new(dir)) {
                Ok(library) => return Ok(library),
                Err(why) => tried.push(why),
            }
        }
    }
    Err(format!(
        "no -L directory holds {LIB_FILE}: {}",
        tried.join("; ")
    ))
}
