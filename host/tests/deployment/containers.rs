//! The image and `podman`, as the image and Kubernetes tests use them: the image built once per run from the
//! binary under test by `deploy/image/build`, and podman with the repository's `deploy/podman/containers.conf`
//! (Debian's runc and explicit ulimits), which a platform team trying the manifests on one machine uses too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The tag the tests build the image under (the manifests' overlay in `kube.rs` names it).
pub const IMAGE: &str = "localhost/strand:test";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ is in the repository").to_path_buf()
}

/// The repository's file at `path` (relative to its root).
pub fn in_repository(path: &str) -> PathBuf {
    repository().join(path)
}

/// The image of the binary under test, built the first time a test asks.
pub fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let output = Command::new(in_repository("deploy/image/build"))
            .args(["--binary", env!("CARGO_BIN_EXE_strand"), "--tag", IMAGE])
            .output()
            .expect("deploy/image/build runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "the image did not build ({}):\n{stdout}{stderr}", output.status);
    });
    IMAGE
}

/// `podman args…`, whatever its exit status.
pub fn podman_output(args: &[&str]) -> Output {
    Command::new("podman")
        .env("CONTAINERS_CONF", in_repository("deploy/podman/containers.conf"))
        .args(args)
        .output()
        .expect("podman runs (.ci/setup installs it)")
}

/// `podman args…`'s standard output; a panic with its error output when it fails.
pub fn podman(args: &[&str]) -> String {
    let output = podman_output(args);
    assert!(output.status.success(), "podman {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A container run on the host's network; removed (stopped first) when dropped.
pub struct Container {
    pub name: String,
}

impl Container {
    /// `podman run --detach --network host --name name args…`.
    pub fn run(name: &str, args: &[&str]) -> Self {
        let _ = podman_output(&["rm", "--force", name]);
        let mut run = vec!["run", "--detach", "--network", "host", "--name", name];
        run.extend_from_slice(args);
        podman(&run);
        Self { name: name.to_owned() }
    }

    /// `podman exec` of `strand args…` in the container: its standard output.
    pub fn strand(&self, args: &[&str]) -> String {
        let mut exec = vec!["exec", self.name.as_str(), "strand"];
        exec.extend_from_slice(args);
        podman(&exec)
    }

    /// Its output so far.
    pub fn log(&self) -> String {
        let output = podman_output(&["logs", &self.name]);
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman_output(&["rm", "--force", "--time", "5", &self.name]);
    }
}
