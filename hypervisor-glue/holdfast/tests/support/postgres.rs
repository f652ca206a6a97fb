//! A private PostgreSQL cluster for one test: initdb into a fresh directory, the server on
//! 127.0.0.1 at a free port with its Unix socket in that directory, `fsync=on` and
//! `synchronous_commit=on` (durable commits, as the TP1 service's), stopped and removed when
//! dropped. PostgreSQL refuses to run as root, so as root it runs as the `postgres` user that
//! Debian's package creates (through runuser); otherwise as the current user.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The PostgreSQL major version the project tests against (ci/setup.sh installs it).
const POSTGRES_MAJOR_VERSION: &str = "15";
/// Where Debian installs a version's programs.
const DEBIAN_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

pub struct PostgresCluster {
    dir: PathBuf,
    bin_dir: PathBuf,
    pub port: u16,
    as_postgres_user: bool,
}

impl PostgresCluster {
    /// Makes and starts a cluster; panics with what is missing if it cannot.
    pub fn start(name: &str) -> Self {
        let bin_dir = PathBuf::from(
            std::env::var_os("HOLDFAST_PG_BIN_DIR").unwrap_or_else(|| DEBIAN_BIN_DIR.into()),
        );
        assert!(
            bin_dir.join("initdb").exists(),
            "PostgreSQL {POSTGRES_MAJOR_VERSION} is not installed ({} missing): run ci/setup.sh, or set HOLDFAST_PG_BIN_DIR",
            bin_dir.join("initdb").display()
        );
        // /proc/self belongs to the process's effective user.
        let as_postgres_user = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self")
                .expect("stat /proc/self")
                .uid()
                == 0
        };
        // Not under the target directory: the postgres user may not be able to reach it.
        let dir = std::env::temp_dir().join(format!("holdfast-pg-{name}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("remove an old cluster directory");
        }
        std::fs::create_dir_all(&dir).expect("create the cluster directory");
        if as_postgres_user {
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("run chown");
            assert!(chown.success(), "chown postgres {}: {chown}", dir.display());
        }
        let port = free_port();
        let cluster = PostgresCluster {
            dir,
            bin_dir,
            port,
            as_postgres_user,
        };
        let data = cluster.dir.join("data");
        let initdb = cluster.run(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
        );
        assert!(
            initdb.status.success(),
            "initdb failed:\n{}",
            transcript(&initdb)
        );
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=on -c synchronous_commit=on",
            path_str(&cluster.dir)
        );
        let log = cluster.dir.join("server.log");
        let start = cluster.run(
            "pg_ctl",
            &[
                "-D",
                path_str(&data),
                "-l",
                path_str(&log),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        if !start.status.success() {
            let server_log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!(
                "pg_ctl start failed:\n{}\n--- server log\n{server_log}",
                transcript(&start)
            );
        }
        cluster
    }

    /// A connection URL for `holdfast tp1 --pg`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `sql` through psql and returns its unaligned output; panics if psql fails.
    pub fn psql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let output = self.run(
            "psql",
            &[
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-c",
                sql,
            ],
        );
        assert!(
            output.status.success(),
            "psql {sql:?} failed:\n{}",
            transcript(&output)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn run(&self, program: &str, arguments: &[&str]) -> Output {
        let program = self.bin_dir.join(program);
        let mut command = if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        command
            .args(arguments)
            .current_dir(&self.dir)
            .env_remove("PGHOST")
            .env_remove("PGPORT")
            .output()
            .unwrap_or_else(|error| panic!("run {}: {error}", program.display()))
    }
}

impl Drop for PostgresCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.run(
            "pg_ctl",
            &["-D", path_str(&data), "-m", "immediate", "-w", "stop"],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port on 127.0.0.1 that nothing listens on now (the kernel's choice for port 0).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn transcript(output: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
