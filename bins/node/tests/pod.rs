//! Finding the launcher from its socket.

use kvrs_node::{PodRef, launcher_pid_of_socket};

#[test]
fn peer_credentials_give_the_serving_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cmd.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    assert_eq!(
        launcher_pid_of_socket(&path).expect("pid"),
        std::process::id()
    );
    let err = launcher_pid_of_socket(&dir.path().join("nope.sock")).expect_err("no socket");
    assert_eq!(err.label(), "peer_credentials");
    assert!(err.to_string().contains("nope.sock"), "{err}");
}

#[test]
fn pod_of_pid_points_into_proc() {
    let pod = PodRef::of_pid(42);
    assert_eq!(pod.netns, std::path::Path::new("/proc/42/ns/net"));
    assert_eq!(pod.root, std::path::Path::new("/proc/42/root"));
}
