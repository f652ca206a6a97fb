//! The host peer of `holdfast bench tp1`, and the PostgreSQL of the `holdfast tp1` tests
//! (hypervisor-glue/holdfast/tests/tp1_postgres.rs): a private PostgreSQL 15 cluster made
//! for the run (initdb into a fresh folder, the server on 127.0.0.1 at a free port, its Unix
//! socket in that folder, the settings [`super::POSTGRES_SETTINGS`] that the guest peer has
//! too, durable commits among them), stopped and removed when dropped. PostgreSQL refuses to run as root, so as root it runs
//! as the `postgres` user Debian's package creates (through runuser).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, bail};

/// Where Debian installs PostgreSQL 15's programs (ci/setup.sh installs `postgresql-15`).
pub const DEBIAN_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

pub struct HostPostgres {
    dir: PathBuf,
    bin_dir: PathBuf,
    pub port: u16,
    as_postgres_user: bool,
    version: String,
}

impl HostPostgres {
    /// Makes and starts a cluster named `name` (clusters of one process need different
    /// names); `bin_dir` holds initdb, pg_ctl, postgres and psql.
    pub fn start(bin_dir: &Path, name: &str) -> anyhow::Result<Self> {
        if !bin_dir.join("initdb").exists() {
            bail!(
                "PostgreSQL 15 is not installed ({} missing): run ci/setup.sh (Debian package postgresql-15)",
                bin_dir.join("initdb").display()
            );
        }
        let as_postgres_user = {
            use std::os::unix::fs::MetadataExt;
            // /proc/self belongs to the process's effective user.
            std::fs::metadata("/proc/self")
                .context("stat /proc/self")?
                .uid()
                == 0
        };
        // Not under the target folder: the postgres user may not be able to reach it.
        let dir = std::env::temp_dir().join(format!("holdfast-pg-{name}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing an old cluster folder {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if as_postgres_user {
            let chown = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status()
                .context("running chown")?;
            if !chown.success() {
                bail!(
                    "chown postgres {}: {chown} (is the postgres user there? ci/setup.sh installs postgresql-15)",
                    dir.display()
                );
            }
        }
        let port = super::free_port()?;
        let mut cluster = HostPostgres {
            dir,
            bin_dir: bin_dir.to_owned(),
            port,
            as_postgres_user,
            version: String::new(),
        };
        let data = cluster.dir.join("data");
        let data_str = path_str(&data)?;
        let initdb = cluster.run(
            "initdb",
            &[
                "-D",
                data_str,
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
        )?;
        if !initdb.status.success() {
            bail!("initdb failed:\n{}", transcript(&initdb));
        }
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {}",
            path_str(&cluster.dir)?
        );
        for (name, value) in super::POSTGRES_SETTINGS {
            options.push_str(&format!(" -c {name}={value}"));
        }
        let log = cluster.dir.join("server.log");
        let start = cluster.run(
            "pg_ctl",
            &[
                "-D",
                data_str,
                "-l",
                path_str(&log)?,
                "-o",
                &options,
                "-w",
                "-t",
                "120",
                "start",
            ],
        )?;
        if !start.status.success() {
            let server_log = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "pg_ctl start failed:\n{}\n--- server log\n{server_log}",
                transcript(&start)
            );
        }
        let version = cluster.run("postgres", &["--version"])?;
        cluster.version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        Ok(cluster)
    }

    /// A connection URL for the load generator.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `postgres (PostgreSQL) 15.x`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Runs `sql` through psql and returns its unaligned output.
    pub fn psql(&self, sql: &str) -> anyhow::Result<String> {
        let port = self.port.to_string();
        let arguments = ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-c", sql];
        let output = self.run("psql", &arguments)?;
        if !output.status.success() {
            bail!("psql {sql:?} failed:\n{}", transcript(&output));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    fn run(&self, program: &str, arguments: &[&str]) -> anyhow::Result<Output> {
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
            .with_context(|| format!("running {}", program.display()))
    }
}

impl Drop for HostPostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        if let Ok(data) = path_str(&data) {
            let _ = self.run("pg_ctl", &["-D", data, "-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

fn transcript(output: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
