//! Leader election against a real kube-apiserver (kvrs-test-cluster), on short timings:
//! 3 s lease, 2 s renew deadline, 0.5 s retry period.
//!
//! One cluster serves every scenario (each on its own Lease), run in order in one test: a
//! control plane per scenario would cost more than the scenarios themselves. The last scenario
//! stops the API server.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kvrs_runtime::kube::lease::{LeaderElector, LeaseConfig, LeaseLost};
use kvrs_test_cluster::{Options, TestCluster};

const NAMESPACE: &str = "kubevirt";
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);
/// Headroom for a shared two-core machine running etcd and the API server too.
const SLACK: Duration = Duration::from_millis(2000);

struct Setup {
    client: kube::Client,
    leases: Api<Lease>,
}

impl Setup {
    fn config(&self, lease: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            lease_duration: LEASE,
            renew_deadline: RENEW,
            retry_period: RETRY,
            ..LeaseConfig::kubevirt(NAMESPACE, lease, identity)
        }
    }

    fn elector(&self, lease: &str, identity: &str) -> LeaderElector {
        LeaderElector::new(self.client.clone(), self.config(lease, identity))
    }

    /// `(holderIdentity, leaseTransitions)` as stored.
    async fn holder(&self, lease: &str) -> (String, i32) {
        let spec = self
            .leases
            .get(lease)
            .await
            .expect("get lease")
            .spec
            .unwrap_or_default();
        (
            spec.holder_identity.unwrap_or_default(),
            spec.lease_transitions.unwrap_or(0),
        )
    }
}

#[track_caller]
fn kubectl_ok(cluster: &TestCluster, args: &[&str]) {
    let out = tokio::task::block_in_place(|| cluster.kubectl(args));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_on_a_real_apiserver() {
    let mut cluster = tokio::task::block_in_place(|| TestCluster::start(Options::apiserver_only()))
        .expect("cluster starts");
    eprintln!("cluster started in {:?}", cluster.started_in());
    kubectl_ok(&cluster, &["create", "namespace", NAMESPACE]);
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.admin_kubeconfig_path())
        .expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    let client = kube::Client::try_from(config).expect("kube client");
    let setup = Setup {
        leases: Api::namespaced(client.clone(), NAMESPACE),
        client,
    };

    exactly_one_acquires_and_a_standby_takes_over_an_abandoned_lease(&setup).await;
    release_hands_over_within_a_retry_period(&setup).await;
    hold_returns_when_the_lease_is_stolen(&setup, &cluster).await;
    a_stale_renew_time_is_not_trusted(&setup, &cluster).await;
    losing_the_apiserver_ends_leadership_within_the_renew_deadline(&setup, &mut cluster).await;
}

async fn exactly_one_acquires_and_a_standby_takes_over_an_abandoned_lease(setup: &Setup) {
    let mut a = setup.elector("exclusive", "a");
    let mut b = setup.elector("exclusive", "b");
    let winner = tokio::select! {
        r = a.acquire() => { r.expect("a acquires"); "a" }
        r = b.acquire() => { r.expect("b acquires"); "b" }
    };
    let (mut leader, mut standby, standby_id) = if winner == "a" {
        (a, b, "b")
    } else {
        (b, a, "a")
    };
    assert_eq!(setup.holder("exclusive").await, (winner.to_owned(), 0));
    let leader_leading = leader.leading();
    assert!(*leader_leading.borrow());
    assert!(!*standby.leading().borrow());

    let holding = tokio::spawn(async move {
        let lost = leader.hold().await;
        panic!("the leader lost a lease nobody contested: {lost:?}");
    });
    // More than a lease duration: a renewed lease must never look expired to the standby.
    let waited = tokio::time::timeout(LEASE + 2 * RETRY, standby.acquire()).await;
    assert!(waited.is_err(), "the standby acquired a held lease");
    assert_eq!(setup.holder("exclusive").await.0, winner);

    // The leader dies without releasing: the standby waits out the lease, then takes over.
    holding.abort();
    let _ = holding.await;
    assert!(!*leader_leading.borrow(), "a dropped elector does not lead");
    let abandoned = Instant::now();
    tokio::time::timeout(LEASE + RETRY + SLACK, standby.acquire())
        .await
        .expect("the standby takes over within lease duration + retry")
        .expect("acquire");
    let took = abandoned.elapsed();
    eprintln!("takeover of an abandoned lease after {took:?}");
    assert!(
        took + RETRY + Duration::from_millis(300) >= LEASE,
        "taken over before the lease could expire: {took:?}"
    );
    assert_eq!(setup.holder("exclusive").await, (standby_id.to_owned(), 1));
    assert!(*standby.leading().borrow());
    standby.release().await.expect("release");
}

async fn release_hands_over_within_a_retry_period(setup: &Setup) {
    let mut a = setup.elector("release", "a");
    a.acquire().await.expect("a acquires");
    let mut b = setup.elector("release", "b");
    let b_leading = b.leading();
    let standby = tokio::spawn(async move {
        b.acquire().await.expect("b acquires");
        (b, Instant::now())
    });
    // Leading for a while (renewing), then a graceful stop: hold is dropped, the lease released.
    tokio::select! {
        lost = a.hold() => panic!("lost an uncontested lease: {lost:?}"),
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
    assert!(!*b_leading.borrow());
    let released = Instant::now();
    a.release().await.expect("release");
    assert!(!*a.leading().borrow());
    let (b, acquired_at) = tokio::time::timeout(RETRY + SLACK, standby)
        .await
        .expect("the standby takes over within a retry period")
        .unwrap();
    eprintln!(
        "takeover after release in {:?}",
        acquired_at.duration_since(released)
    );
    assert!(acquired_at.duration_since(released) <= RETRY + Duration::from_millis(700));
    assert_eq!(setup.holder("release").await, ("b".to_owned(), 1));
    assert!(*b_leading.borrow());
    assert!(matches!(a.hold().await, LeaseLost::NotLeading));
    drop(b);
}

async fn hold_returns_when_the_lease_is_stolen(setup: &Setup, cluster: &TestCluster) {
    let mut a = setup.elector("stolen", "a");
    a.acquire().await.expect("a acquires");
    let leading = a.leading();
    let holding = tokio::spawn(async move { (a.hold().await, Instant::now()) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let patch = r#"{"spec":{"holderIdentity":"thief"}}"#;
    let stolen = Instant::now();
    kubectl_ok(
        cluster,
        &[
            "patch",
            "lease",
            "stolen",
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            patch,
        ],
    );
    let (lost, lost_at) = tokio::time::timeout(RETRY + SLACK, holding)
        .await
        .expect("hold returns soon after the steal")
        .unwrap();
    eprintln!("steal noticed after {:?}", lost_at.duration_since(stolen));
    match lost {
        LeaseLost::Stolen { holder } => assert_eq!(holder, "thief"),
        other => panic!("expected a stolen lease, got {other:?}"),
    }
    assert!(!*leading.borrow());
    assert_eq!(setup.holder("stolen").await.0, "thief");
}

async fn a_stale_renew_time_is_not_trusted(setup: &Setup, cluster: &TestCluster) {
    // A holder whose clock is far behind: its renewTime looks ancient, yet it may be alive.
    let lease = format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{{"name":"skewed","namespace":"{NAMESPACE}"}},
            "spec":{{"holderIdentity":"ghost","leaseDurationSeconds":3,
                     "renewTime":"2000-01-01T00:00:00.000000Z","leaseTransitions":4}}}}"#
    );
    let out =
        tokio::task::block_in_place(|| cluster.kubectl_with_stdin(["apply", "-f", "-"], &lease));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = setup.elector("skewed", "c");
    let begun = Instant::now();
    tokio::time::timeout(LEASE + RETRY + SLACK, c.acquire())
        .await
        .expect("acquires once the lease expired locally")
        .expect("acquire");
    let took = begun.elapsed();
    eprintln!("takeover of a skewed lease after {took:?}");
    assert!(
        took >= LEASE,
        "trusted the remote renewTime: acquired after {took:?}"
    );
    assert_eq!(setup.holder("skewed").await, ("c".to_owned(), 5));
}

async fn losing_the_apiserver_ends_leadership_within_the_renew_deadline(
    setup: &Setup,
    cluster: &mut TestCluster,
) {
    let mut a = setup.elector("fenced", "a");
    a.acquire().await.expect("a acquires");
    let holding = tokio::spawn(async move { (a.hold().await, Instant::now()) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = Instant::now();
    tokio::task::block_in_place(|| cluster.stop_apiserver()).expect("stop apiserver");
    let stopped = Instant::now();
    let (lost, lost_at) = tokio::time::timeout(RENEW + SLACK, holding)
        .await
        .expect("hold returns within the renew deadline")
        .unwrap();
    eprintln!(
        "apiserver stopped in {:?}; leadership given up {:?} after the stop began",
        stopped - stopping,
        lost_at.saturating_duration_since(stopping)
    );
    match &lost {
        LeaseLost::RenewDeadline { last_error } => {
            eprintln!("last renewal error: {last_error:?}");
        }
        other => panic!("expected the renew deadline, got {other:?}"),
    }
    assert!(lost_at.saturating_duration_since(stopped) <= RENEW + Duration::from_millis(500));
}
