//! `ServerBuilder`: a server with extra configuration, and how to stop one before a restart.

use std::path::{Path, PathBuf};

use super::*;

/// How to stop a server before restarting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `SHUTDOWN SAVE`: write an RDB snapshot (and fsync the AOF) before exiting.
    Save,
    /// `SHUTDOWN NOSAVE`: exit without a snapshot (the AOF, if enabled, is still fsynced).
    NoSave,
    /// SIGKILL: simulates a crash.
    Kill,
}

/// Builder for a `Server` with extra configuration.
#[derive(Clone, Debug, Default)]
pub struct ServerBuilder {
    pub(crate) args: Vec<String>,
    pub(crate) without_module: bool,
    pub(crate) module_in_config_file: bool,
    pub(crate) example_config: bool,
    pub(crate) module_args: Vec<String>,
    pub(crate) replica_of: Option<u16>,
    pub(crate) cluster: bool,
    pub(crate) module_file: Option<PathBuf>,
}

impl ServerBuilder {
    /// Adds a config directive, e.g. `.config("appendonly", &["yes"])`. Later directives override
    /// earlier ones (including the harness defaults).
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        self.args.push(format!("--{name}"));
        self.args.extend(values.iter().map(|v| v.to_string()));
        self
    }

    /// Shorthand for a single-valued directive.
    pub fn set(self, name: &str, value: &str) -> Self {
        self.config(name, &[value])
    }

    /// Start without `--loadmodule` (for `MODULE LOAD` tests).
    pub fn without_module(mut self) -> Self {
        self.without_module = true;
        self
    }

    /// Load this module file instead of the one under test (another build, e.g. an earlier
    /// release's for the upgrade tests).
    pub fn module_file(mut self, path: &Path) -> Self {
        self.module_file = Some(path.to_path_buf());
        self
    }

    /// Load the module with a `loadmodule <path>` line in a redis.conf (passed as the first
    /// argument) instead of `--loadmodule`.
    pub fn module_in_config_file(mut self) -> Self {
        self.module_in_config_file = true;
        self
    }

    /// Arguments after the module path (`--loadmodule <path> <args…>`).
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Start from the repository's `redis.conf.example`, which loads the module by a path
    /// relative to the repository (the harness's own settings still override the rest).
    pub fn example_config(mut self) -> Self {
        self.example_config = true;
        self
    }

    /// Make this server a replica of `master` (on 127.0.0.1). `start()` then waits until the link
    /// is up and the master's `WAIT 1 5000` answers 1.
    pub fn replica_of(mut self, master: &Server) -> Self {
        self.replica_of = Some(master.port());
        self
    }

    /// A Redis Cluster node: `cluster-enabled yes`, its `cluster-config-file` in the server's
    /// temporary directory, and a port whose cluster bus port (port + 10000) is a valid, free
    /// port too. The node starts without slots; see `tests/cluster.rs` for building a cluster.
    pub fn cluster_enabled(mut self) -> Self {
        self.cluster = true;
        self
    }

    pub fn start(self) -> Server {
        let replica_of = self.replica_of;
        let mut args = self.args;
        if let Some(p) = replica_of {
            args.push("--replicaof".into());
            args.push("127.0.0.1".into());
            args.push(p.to_string());
        }
        let module = if self.without_module {
            None
        } else {
            Some(self.module_file.unwrap_or_else(module_path))
        };
        let dir = unique_temp_dir();
        let mut config_file = None;
        let mut module = module;
        if self.module_in_config_file {
            let path = dir.join("redis.conf");
            let m = module
                .take()
                .expect("module_in_config_file with without_module");
            std::fs::write(&path, format!("loadmodule {}\n", m.display())).expect("write conf");
            config_file = Some(path);
        }
        if self.example_config {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            // Redis enters `--dir` before loading modules: give the relative path a target there.
            std::os::unix::fs::symlink(repo.join("target"), dir.join("target"))
                .expect("symlink target");
            config_file = Some(repo.join("redis.conf.example"));
            module = None;
        }
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            args,
            module,
            module_args: self.module_args,
            config_file,
            cluster: self.cluster,
            allow_crash_signs: false,
        };
        server.launch_on_free_port();
        if let Some(master_port) = replica_of {
            server.wait_replica_synced(master_port);
        }
        server
    }
}

impl Server {
    /// The module file the next `launch` or `restart` loads (the server must load one already).
    pub fn set_module_file(&mut self, path: &Path) {
        assert!(self.module.is_some(), "the server loads no module file");
        self.module = Some(path.to_path_buf());
    }
}
