//! ACLs in a cluster whose brokers talk to each other over SASL_SSL: an
//! ACL made through one broker applies on every broker without a restart,
//! and a request one broker forwards to another (an admin request for the
//! active controller, in Kafka's Envelope) is authorized as the client's
//! principal, not the forwarding broker's: the brokers themselves are
//! super users, so a forwarded request authorized as its broker would
//! always pass.

mod common;

use std::process::Output;

use test_support::certs::Certificates;
use test_support::cluster::Cluster;
use test_support::{poll_until, run, strom_at};

/// The inter-broker listener's PLAIN users: the brokers and two clients.
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"broker\" password=\"broker-secret\" user_broker=\"broker-secret\" \
    user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

struct Secured {
    cluster: Cluster,
    certificates: Certificates,
    dir: tempfile::TempDir,
}

impl Secured {
    fn start() -> Secured {
        let certificates = Certificates::make();
        let mut args = certificates.secured_cluster_args();
        let listener = test_support::cluster::INTER_BROKER_LISTENER.to_ascii_lowercase();
        for setting in [
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                .to_string(),
            // The brokers, and operators on the loopback PLAINTEXT listener.
            "super.users=User:broker;User:ANONYMOUS".to_string(),
            format!("listener.name.{listener}.plain.sasl.jaas.config={JAAS}"),
        ] {
            args.extend(["--set".to_string(), setting]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cluster = Cluster::start_secured(3, &args);
        Secured {
            cluster,
            certificates,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// `strom ARGS` on node `id`'s SASL_SSL listener as `user`.
    fn strom_as(&self, id: i32, user: &str, args: &[&str]) -> Output {
        let config = self.dir.path().join(format!("{user}.properties"));
        std::fs::write(
            &config,
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username={user}\n\
                 sasl.password={user}-secret\nssl.truststore.location={}\n",
                self.certificates.text("ca.pem")
            ),
        )
        .unwrap();
        let bootstrap = format!("127.0.0.1:{}", self.cluster.node(id).ports.inter_broker);
        let mut all = args.to_vec();
        let config = config.to_string_lossy().into_owned();
        all.extend(["--command-config", &config]);
        strom_at(Some(&bootstrap), &all, None)
    }

    /// `strom ARGS` on node `id`'s PLAINTEXT listener (a super user).
    fn operator(&self, id: i32, args: &[&str]) -> String {
        let output = strom_at(Some(&self.cluster.node(id).broker.bootstrap()), args, None);
        assert!(
            output.status.success(),
            "strom {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.cluster.logs()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The active controller's id.
    fn controller(&self) -> i32 {
        self.cluster.wait_for("a controller", || {
            let status = strom_at(
                Some(&self.cluster.node(1).broker.bootstrap()),
                &["cluster", "status"],
                None,
            );
            String::from_utf8_lossy(&status.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("Controller: ")?.trim().parse::<i32>().ok())
                .filter(|id| *id > 0)
        })
    }
}

fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn acls_apply_on_every_broker_and_forwarded_requests_are_authorized_as_the_client() {
    let secured = Secured::start();
    secured.operator(
        2,
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Create",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--topic",
            "alice-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    // Made through broker 2, in force on every broker.
    for id in 1..=3 {
        let seen = poll_until(std::time::Duration::from_secs(30), || {
            let listed = secured.operator(id, &["acl", "list"]);
            listed
                .contains("TOPIC\talice-\tPREFIXED\tUser:alice\t*\tCREATE\tALLOW")
                .then_some(())
        });
        assert!(seen.is_some(), "broker {id} lists alice's ACL");
    }

    // `strom cluster status` shows each broker's listeners and protocols.
    let status = secured.operator(1, &["cluster", "status"]);
    for id in 1..=3 {
        let node = secured.cluster.node(id);
        for row in [
            format!(
                "PLAINTEXT\t{id}\tPLAINTEXT\t127.0.0.1:{}\tclients",
                node.ports.client
            ),
            format!(
                "BROKER\t{id}\tSASL_SSL\t127.0.0.1:{}\tclients, inter-broker",
                node.ports.inter_broker
            ),
            format!(
                "CONTROLLER\t{id}\tSASL_SSL\t127.0.0.1:{}\tcontroller",
                node.ports.controller.expect("a voter")
            ),
        ] {
            assert!(status.contains(&row), "{row:?} not in:\n{status}");
        }
    }

    // CreateTopics goes to the active controller: from the other brokers
    // it is forwarded. Alice may create her topics through each broker;
    // Bob, who has no ACL, through none, though every forwarding broker
    // is a super user.
    let controller = secured.controller();
    let forwarding: Vec<i32> = (1..=3).filter(|id| *id != controller).collect();
    assert_eq!(forwarding.len(), 2);
    for id in 1..=3 {
        let topic = format!("alice-{id}");
        let created = secured.strom_as(id, "alice", &["topic", "create", &topic]);
        assert!(
            created.status.success(),
            "alice creates {topic} through broker {id}: {}\n{}",
            said(&created),
            secured.cluster.logs()
        );
        let refused = secured.strom_as(id, "bob", &["topic", "create", &format!("bob-{id}")]);
        assert!(
            !refused.status.success(),
            "bob created bob-{id} through broker {id}"
        );
        assert!(
            said(&refused).contains("TOPIC_AUTHORIZATION_FAILED"),
            "bob through broker {id}: {}",
            said(&refused)
        );
        let sneaky = secured.strom_as(id, "bob", &["topic", "create", &format!("alice-bob-{id}")]);
        assert!(
            !sneaky.status.success(),
            "bob created a topic of alice's prefix through broker {id}"
        );
    }
    // Each topic exists once, made by alice; none of bob's.
    let listed = secured.operator(1, &["topic", "list"]);
    for id in 1..=3 {
        assert!(
            listed.lines().any(|l| l.trim() == format!("alice-{id}")),
            "{listed}"
        );
        assert!(!listed.contains(&format!("bob-{id}")), "{listed}");
    }

    // Records alice writes through one broker's SASL_SSL listener are
    // read back byte for byte through another's.
    let records: Vec<String> = (0..50).map(|i| format!("alice-record-{i:03}")).collect();
    let kcat = |id: i32, user: &str, args: &[&str], stdin: Option<&[u8]>| {
        let mut command = std::process::Command::new("kcat");
        command
            .args([
                "-b",
                &format!("127.0.0.1:{}", secured.cluster.node(id).ports.inter_broker),
            ])
            .args(args)
            .args([
                "-X",
                "security.protocol=SASL_SSL",
                "-X",
                "sasl.mechanisms=PLAIN",
            ])
            .args(["-X", &format!("sasl.username={user}")])
            .args(["-X", &format!("sasl.password={user}-secret")])
            .args([
                "-X",
                &format!("ssl.ca.location={}", secured.certificates.text("ca.pem")),
            ]);
        run(&mut command, stdin, std::time::Duration::from_secs(60))
    };
    let input = records.join("\n") + "\n";
    let written = kcat(
        forwarding[0],
        "alice",
        &["-P", "-t", "alice-1", "-p", "0"],
        Some(input.as_bytes()),
    );
    assert!(written.status.success(), "{}", said(&written));
    let read = secured.operator(
        forwarding[1],
        &[
            "consume",
            "alice-1",
            "--from-beginning",
            "--max-messages",
            "50",
        ],
    );
    let got: Vec<&str> = read.lines().collect();
    assert_eq!(got, records, "alice's records, byte for byte");
    let refused = kcat(
        forwarding[1],
        "bob",
        &["-P", "-t", "alice-1", "-p", "0"],
        Some(b"bob was here\n"),
    );
    assert!(!refused.status.success(), "bob wrote alice-1");
}

/// A node whose login the controller listener refuses is told so, logged
/// by the voters with why, and never registers: the cluster goes on with
/// the others.
#[test]
fn a_node_refused_on_the_controller_listener_never_registers() {
    let mut secured = Secured::start();
    let wrong = "listener.name.controller.plain.sasl.jaas.config=\
        org.apache.kafka.common.security.plain.PlainLoginModule required \
        username=\"broker\" password=\"not-the-password\" user_broker=\"not-the-password\";";
    secured.cluster.add_broker_with(4, &["--set", wrong]);
    let refused = poll_until(std::time::Duration::from_secs(30), || {
        (1..=3)
            .map(|id| secured.cluster.node(id).broker.log())
            .find(|log| {
                log.lines().any(|l| {
                    l.contains("closing controller connection: not admitted")
                        && l.contains("wrong password or unknown user")
                })
            })
            .map(|_| ())
    });
    assert!(
        refused.is_some(),
        "no voter logged the refusal:\n{}",
        secured.cluster.logs()
    );
    let status = secured.operator(1, &["cluster", "status"]);
    let brokers: Vec<&str> = status
        .lines()
        .skip_while(|l| !l.starts_with("BROKER\t"))
        .skip(1)
        .take_while(|l| {
            l.split('\t')
                .next()
                .is_some_and(|id| id.parse::<i32>().is_ok())
        })
        .collect();
    assert_eq!(
        brokers.len(),
        3,
        "only the three nodes registered:\n{status}"
    );
    assert!(
        brokers.iter().all(|l| !l.starts_with("4\t")),
        "node 4 registered:\n{status}"
    );
    // The others still take changes.
    secured.operator(2, &["topic", "create", "after-the-refusal"]);
}

/// Brokers that replicate over mutual TLS: their own listener is SSL with
/// `ssl.client.auth=required`, so each shows its certificate to the
/// others; a topic of three replicas keeps all three in sync, and its
/// records read back byte for byte from another broker.
#[test]
fn brokers_replicate_over_mutual_tls() {
    let certificates = Certificates::make();
    let mut args = certificates.secured_cluster_args();
    let listener = test_support::cluster::INTER_BROKER_LISTENER.to_ascii_lowercase();
    args.extend([
        "--set".to_string(),
        format!("listener.name.{listener}.ssl.client.auth=required"),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = Cluster::start_secured_over(3, "SSL", &args);
    let operator = |id: i32, args: &[&str]| {
        let output = strom_at(Some(&cluster.node(id).broker.bootstrap()), args, None);
        assert!(
            output.status.success(),
            "strom {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            cluster.logs()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    operator(
        1,
        &[
            "topic",
            "create",
            "mtls",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ],
    );
    let records: Vec<String> = (0..60).map(|i| format!("over-mtls-{i:02}")).collect();
    let input = records.join("\n") + "\n";
    let produced = run(
        std::process::Command::new("kcat").args([
            "-b",
            &cluster.node(2).broker.bootstrap(),
            "-P",
            "-t",
            "mtls",
            "-p",
            "0",
            "-X",
            "acks=all",
        ]),
        Some(input.as_bytes()),
        std::time::Duration::from_secs(60),
    );
    assert!(
        produced.status.success(),
        "{produced:?}\n{}",
        cluster.logs()
    );
    // Every replica in sync: the followers fetch over mutual TLS.
    let bootstrap = cluster.node(3).broker.bootstrap();
    cluster.wait_for("three replicas of every partition in sync", || {
        let listed = run(
            std::process::Command::new("kcat").args(["-b", &bootstrap, "-L", "-J", "-t", "mtls"]),
            None,
            std::time::Duration::from_secs(30),
        );
        let json: serde_json::Value = serde_json::from_slice(&listed.stdout).ok()?;
        let partitions = json["topics"][0]["partitions"].as_array()?.clone();
        (partitions.len() == 3
            && partitions
                .iter()
                .all(|p| p["isrs"].as_array().is_some_and(|isr| isr.len() == 3)))
        .then_some(())
    });
    let read = operator(
        3,
        &[
            "consume",
            "mtls",
            "--partition",
            "0",
            "--from-beginning",
            "--max-messages",
            "60",
        ],
    );
    assert_eq!(read.lines().collect::<Vec<_>>(), records);
    let log = cluster.logs();
    assert!(
        !log.contains("TLS handshake failed"),
        "a broker's certificate was refused:\n{log}"
    );
}
