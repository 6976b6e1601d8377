// Build script for the ddpspawn crate: gives this crate's own binaries
// (tests, examples) an rpath to the directory where ddpspawn-sys found
// libddpspawn.so, so that they run without LD_LIBRARY_PATH. Cargo only applies
// link arguments to the package that prints them, so ddpspawn-sys passes the
// directory along as DEP_DDPSPAWN_LIB_DIR. A downstream binary crate can do the
// same in its own build.rs (with a direct dependency on ddpspawn-sys) or set
// LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_DDPSPAWN_LIB_DIR");
    if let Some(dirs) = std::env::var_os("DEP_DDPSPAWN_LIB_DIR") {
        for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        }
    }
}
