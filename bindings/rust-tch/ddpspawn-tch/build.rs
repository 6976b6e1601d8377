// Build script of ddpspawn-tch: an rpath to LibTorch's directory for this crate's binaries (a
// dependency's rpath does not reach them; libddpspawn needs none, ddpspawn-sys loads it at run
// time), and libtorch_cuda kept linked although nothing names it (rustc links with --as-needed;
// without it CUDA never registers).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Some(dirs) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") {
        for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        }
    }
    if let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") {
        if std::path::Path::new(&lib).join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
