//! The dependency step (`scripts/deps.sh`) judged against fake machines, so
//! the test does not depend on what the test machine happens to have.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct FakeMachine {
    root: PathBuf,
}

impl FakeMachine {
    fn new(name: &str) -> Self {
        let root =
            std::env::temp_dir().join(format!("redislock-deps-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        // Every other tool is "installed": only libclang is in question.
        let bin = root.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for tool in ["redis-server", "redis-cli", "cc"] {
            let path = bin.join(tool);
            fs::write(&path, "#!/bin/sh\necho 'Redis server v=7.0.15'\n").unwrap();
            let mut perms = fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            fs::set_permissions(&path, perms).unwrap();
        }
        FakeMachine { root }
    }

    fn lib(&self, rel: &str) -> &Self {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
        self
    }

    fn run(&self, libclang_path: Option<&Path>) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/deps.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(script)
            .env("REDISLOCK_DEPS_ROOT", &self.root)
            .env("REDISLOCK_DEPS_DRY_RUN", "1")
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.root.join("bin").display()),
            )
            .env_remove("LIBCLANG_PATH");
        if let Some(p) = libclang_path {
            cmd.env("LIBCLANG_PATH", p);
        }
        let out = cmd.output().expect("run scripts/deps.sh");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for FakeMachine {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[test]
fn llvm_without_libclang_asks_for_libclang_dev() {
    // What LLVM 14 pulls in on Debian: libLLVM and the C++ libclang-cpp, not
    // the C library bindgen loads.
    let m = FakeMachine::new("cpp-only");
    m.lib("usr/lib/llvm-14/lib/libLLVM-14.so")
        .lib("usr/lib/llvm-14/lib/libclang-cpp.so.14")
        .lib("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14");
    assert_eq!(m.run(None), "redislock: would install libclang-dev");
}

#[test]
fn no_llvm_at_all_asks_for_libclang_dev() {
    let m = FakeMachine::new("bare");
    assert_eq!(m.run(None), "redislock: would install libclang-dev");
}

#[test]
fn any_library_bindgen_loads_is_enough() {
    for lib in [
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/lib/llvm-16/lib/libclang.so",
        "usr/lib/x86_64-linux-gnu/libclang-14.so.1",
        "usr/lib/x86_64-linux-gnu/libclang-15.so",
    ] {
        let m = FakeMachine::new("has-libclang");
        m.lib("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14")
            .lib(lib);
        assert_eq!(m.run(None), "redislock: nothing to install", "{lib}");
    }
}

#[test]
fn libclang_path_is_honoured() {
    let m = FakeMachine::new("libclang-path");
    m.lib("opt/llvm/lib/libclang.so");
    assert_eq!(
        m.run(Some(&m.root.join("opt/llvm/lib"))),
        "redislock: nothing to install"
    );
    // A LIBCLANG_PATH holding only the C++ library is not enough.
    let n = FakeMachine::new("libclang-path-cpp");
    n.lib("opt/llvm/lib/libclang-cpp.so.14");
    assert_eq!(
        n.run(Some(&n.root.join("opt/llvm/lib"))),
        "redislock: would install libclang-dev"
    );
}
