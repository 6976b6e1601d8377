//! The library is loaded at run time: `$DDPSPAWN_LIBRARY` overrides the path
//! the build script found, and a path that cannot be loaded is a panic that
//! names it and the variable. Each case runs in a child process (this test
//! binary again, filtered to `child`), as a process loads the library once.

use std::env;
use std::process::Command;

/// Runs the `child` test in a new process with `DDPSPAWN_LIBRARY=library`.
fn run_child(library: &str) -> std::process::Output {
    Command::new(env::current_exe().expect("this test's path"))
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("DDPSPAWN_LOADER_CHILD", "1")
        .env("DDPSPAWN_LIBRARY", library)
        .output()
        .expect("run the child")
}

/// In a child: loads the library and prints where from and its ABI version.
#[test]
fn child() {
    if env::var_os("DDPSPAWN_LOADER_CHILD").is_none() {
        return;
    }
    let version = unsafe { ddpspawn_sys::ddpspawn_abi_version() };
    println!(
        "loaded {} abi {version}",
        ddpspawn_sys::library_path().display()
    );
}

#[test]
fn ddpspawn_library_overrides_the_built_path() {
    // A copy of the built library somewhere else, named by the variable.
    let built = env!("DDPSPAWN_SYS_LIBRARY");
    // Created exclusively (create_dir fails on an existing path), in Bazel's
    // private test directory when there is one.
    let base = env::var_os("TEST_TMPDIR").map_or_else(env::temp_dir, Into::into);
    let dir = base.join(format!("sys-loader-test-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let copy = dir.join("libddpspawn.so.1");
    std::fs::copy(built, &copy).unwrap();
    let out = run_child(copy.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("loaded {} abi 1", copy.display())),
        "{stdout}"
    );
}

#[test]
fn a_library_that_cannot_be_loaded_is_named() {
    let out = run_child("/nonexistent/libddpspawn.so.1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot load /nonexistent/libddpspawn.so.1")
            && stderr.contains("DDPSPAWN_LIBRARY"),
        "{stderr}"
    );
}
