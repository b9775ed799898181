//! The built-in authorizer with ACLs in the metadata: a broker with
//! `authorizer.class.name` set, SASL PLAIN users and a super user. ACLs
//! set with `strom acl` and confluent-kafka's admin API decide what kcat,
//! confluent-kafka and the tools may do (literal and prefixed patterns,
//! allow and deny, Metadata hiding, groups); every refusal is Kafka's code;
//! ACLs outlive a restart; without an authorizer the ACL APIs answer
//! SECURITY_DISABLED. With mutual TLS, the principal is the client
//! certificate's subject mapped by `ssl.principal.mapping.rules`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::admin::Admin;
use common::{free_port, run, run_python, Broker};

const DEADLINE: Duration = Duration::from_secs(60);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_bob=\"bob-secret\" \
    user_carol=\"carol-secret\";";

/// A broker serving SASL_PLAINTEXT with PLAIN, with the authorizer on
/// (`authorizer`) and `User:admin` its super user.
fn broker(authorizer: bool) -> Broker {
    broker_and_admin(authorizer).0
}

/// The same and its admin listener.
fn broker_and_admin(authorizer: bool) -> (Broker, Admin) {
    let port = free_port();
    let admin = Admin { port: free_port() };
    let admin_address = admin.address();
    let mut settings = vec![
        format!("listeners=SASL_PLAINTEXT://127.0.0.1:{port}"),
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN".to_string(),
        format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"),
    ];
    if authorizer {
        settings.push(
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                .to_string(),
        );
        settings.push("super.users=User:admin".to_string());
    }
    let mut args = vec!["--admin-listen", admin_address.as_str()];
    for setting in &settings {
        args.push("--set");
        args.push(setting.as_str());
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let broker = Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args);
    (broker, admin)
}

/// `strom_authorization_denials_total` of `resource`, over the cores.
fn denials(admin: &Admin, resource: &str) -> f64 {
    let (_, body) = admin.get("/metrics");
    body.lines()
        .filter(|l| {
            l.starts_with("strom_authorization_denials_total{")
                && l.contains(&format!("resource=\"{resource}\""))
                && !l.contains("shard=\"all\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// kcat as `user`.
fn kcat(broker: &Broker, user: &str, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut command = Command::new("kcat");
    command
        .args(["-b", &broker.bootstrap()])
        .args(args)
        .args([
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=PLAIN",
        ])
        .args(["-X", &format!("sasl.username={user}")])
        .args(["-X", &format!("sasl.password={user}-secret")]);
    run(&mut command, stdin, DEADLINE)
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `strom ARGS` as `user` (PLAIN through `--command-config`).
fn strom_as(
    broker: &Broker,
    dir: &std::path::Path,
    user: &str,
    args: &[&str],
) -> std::process::Output {
    let config = dir.join(format!("{user}.properties"));
    std::fs::write(
        &config,
        format!(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={user}\n\
             sasl.password={user}-secret\n"
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    let mut all = args.to_vec();
    all.extend(["--command-config", &config]);
    common::strom(broker, &all, None)
}

fn ok(broker: &Broker, dir: &std::path::Path, user: &str, args: &[&str]) -> String {
    let output = strom_as(broker, dir, user, args);
    common::succeeded(output, &format!("{user}: strom {args:?}"), broker)
}

#[test]
fn acls_decide_what_each_principal_may_do_and_outlive_a_restart() {
    let (mut broker, admin) = broker_and_admin(true);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for topic in ["orders", "pay-eu", "pay-secret", "hidden"] {
        ok(&broker, dir, "admin", &["topic", "create", topic]);
    }
    let add = |args: &[&str]| {
        let mut all = vec!["acl", "add"];
        all.extend_from_slice(args);
        ok(&broker, dir, "admin", &all);
    };
    add(&[
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ]);
    add(&[
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "pay-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    add(&[
        "--deny-principal",
        "User:alice",
        "--operation",
        "All",
        "--topic",
        "pay-secret",
    ]);
    add(&[
        "--allow-principal",
        "User:bob",
        "--operation",
        "Read",
        "--topic",
        "orders",
        "--group",
        "billing",
    ]);
    let listed = ok(&broker, dir, "admin", &["acl", "list"]);
    assert_eq!(listed.lines().count(), 1 + 5, "{listed}");
    assert!(
        listed.contains("TOPIC\tpay-\tPREFIXED\tUser:alice\t*\tWRITE\tALLOW"),
        "{listed}"
    );

    // Produce: WRITE on the topic; a deny wins over the prefixed allow.
    let lines = "order-1\norder-2\norder-3\n";
    let produce = |user: &str, topic: &str, body: &str| {
        kcat(
            &broker,
            user,
            &["-P", "-t", topic, "-p", "0"],
            Some(body.as_bytes()),
        )
    };
    let written = produce("alice", "orders", lines);
    assert!(written.status.success(), "{}", stderr(&written));
    let written = produce("alice", "pay-eu", "eu\n");
    assert!(written.status.success(), "{}", stderr(&written));
    for (user, topic) in [
        ("alice", "pay-secret"),
        ("bob", "orders"),
        ("carol", "orders"),
    ] {
        let refused = produce(user, topic, "no\n");
        assert!(!refused.status.success(), "{user} wrote {topic}");
        assert!(
            stderr(&refused).contains("Topic authorization failed"),
            "{user} {topic}: {}",
            stderr(&refused)
        );
    }

    // Fetch and groups: READ on the topic and the group.
    let consume = |user: &str, group: &str| {
        kcat(
            &broker,
            user,
            &[
                "-C",
                "-G",
                group,
                "orders",
                "-o",
                "beginning",
                "-e",
                "-f",
                "%s\n",
            ],
            None,
        )
    };
    let read = consume("bob", "billing");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        lines,
        "{}",
        stderr(&read)
    );
    let refused = consume("bob", "other-group");
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("order-1"));
    assert!(
        stderr(&refused).contains("Group authorization failed"),
        "{}",
        stderr(&refused)
    );
    let refused = kcat(
        &broker,
        "alice",
        &["-C", "-t", "orders", "-o", "beginning", "-e"],
        None,
    );
    assert!(
        stderr(&refused).contains("Topic authorization failed"),
        "{}",
        stderr(&refused)
    );

    // Metadata lists only what a principal may describe.
    let topics = |user: &str| {
        let listed = kcat(&broker, user, &["-L"], None);
        String::from_utf8_lossy(&listed.stdout).into_owned()
    };
    let bob_sees = topics("bob");
    assert!(
        bob_sees.contains("\"orders\"") && !bob_sees.contains("\"hidden\""),
        "{bob_sees}"
    );
    let admin_sees = topics("admin");
    assert!(admin_sees.contains("\"hidden\""), "{admin_sees}");

    // Admin APIs: CREATE on the cluster; the ACL APIs ALTER and DESCRIBE.
    let refused = strom_as(&broker, dir, "carol", &["topic", "create", "carols"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("TOPIC_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&refused)
    );
    let refused = strom_as(&broker, dir, "carol", &["acl", "list"]);
    assert!(
        stderr(&refused).contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&refused)
    );
    // Each refusal counted by its resource type.
    for resource in ["topic", "group", "cluster"] {
        assert!(
            denials(&admin, resource) >= 1.0,
            "no {resource} denial counted"
        );
    }
    add(&[
        "--allow-principal",
        "User:carol",
        "--operation",
        "Create",
        "--cluster",
    ]);
    ok(&broker, dir, "carol", &["topic", "create", "carols"]);

    // Removed: bob's READ on orders.
    let removed = ok(
        &broker,
        dir,
        "admin",
        &[
            "acl",
            "remove",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ],
    );
    assert!(removed.contains("Removed 1 ACL(s)."), "{removed}");
    let refused = consume("bob", "billing");
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("order-1"));

    // After a restart: the same ACLs, from the metadata log.
    let before = ok(&broker, dir, "admin", &["acl", "list"]);
    broker.restart();
    assert_eq!(ok(&broker, dir, "admin", &["acl", "list"]), before);
    let produce = |user: &str, topic: &str, body: &str| {
        kcat(
            &broker,
            user,
            &["-P", "-t", topic, "-p", "0"],
            Some(body.as_bytes()),
        )
    };
    let refused = produce("alice", "pay-secret", "no\n");
    assert!(
        !refused.status.success(),
        "the deny did not outlive the restart"
    );
    let written = produce("alice", "pay-eu", "eu-again\n");
    assert!(written.status.success(), "{}", stderr(&written));
}

#[test]
fn confluent_kafkas_admin_acl_api_and_clients_follow_the_acls() {
    let broker = broker(true);
    let out = run_python("acl_check.py", &[&broker.bootstrap()], SCRIPT_DEADLINE);
    for wanted in [
        "acl: created 3",
        "acl: refused binding INVALID_REQUEST",
        "acl: described 3 by principal, 2 by match",
        "acl: carol read 20",
        "acl: carol audit-secret TOPIC_AUTHORIZATION_FAILED",
        "acl: carol group others GROUP_AUTHORIZATION_FAILED",
        "acl: alice produce TOPIC_AUTHORIZATION_FAILED",
        "acl: after delete carol",
    ] {
        assert!(
            out.contains(wanted),
            "{wanted:?} not in {out}\n{}",
            broker.log()
        );
    }
}

#[test]
fn without_an_authorizer_the_acl_apis_answer_security_disabled() {
    let broker = broker(false);
    let dir = tempfile::tempdir().unwrap();
    let refused = strom_as(&broker, dir.path(), "alice", &["acl", "list"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("SECURITY_DISABLED"),
        "{}",
        stderr(&refused)
    );
    let refused = strom_as(
        &broker,
        dir.path(),
        "alice",
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "t",
        ],
    );
    assert!(
        stderr(&refused).contains("SECURITY_DISABLED"),
        "{}",
        stderr(&refused)
    );
    // Everyone may do everything.
    let written = kcat(
        &broker,
        "bob",
        &["-P", "-t", "open", "-p", "0"],
        Some(b"x\n"),
    );
    assert!(written.status.success(), "{}", stderr(&written));
}

/// Mutual TLS: each client certificate's subject, mapped by
/// `ssl.principal.mapping.rules`, is the principal the ACLs name.
#[test]
fn a_client_certificate_names_the_principal_through_the_mapping_rules() {
    let certificates = test_support::certs::Certificates::make();
    certificates.client("admin");
    certificates.client("bob");
    let port = free_port();
    let settings = [
        format!("listeners=SSL://127.0.0.1:{port}"),
        format!(
            "ssl.keystore.location={}",
            certificates.text("server-keystore.pem")
        ),
        format!("ssl.truststore.location={}", certificates.text("ca.pem")),
        "ssl.client.auth=required".to_string(),
        // CN=alice names User:ALICE.
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*)$/$1/U,DEFAULT".to_string(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_string(),
        "super.users=User:ADMIN".to_string(),
    ];
    let mut args = Vec::new();
    for setting in &settings {
        args.extend(["--set", setting.as_str()]);
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let broker = Broker::start_at(&dir.join("data"), &dir.join("strom.log"), port, &args);
    let tools = tempfile::tempdir().unwrap();
    let admin_config = tools.path().join("admin.properties");
    std::fs::write(
        &admin_config,
        format!(
            "security.protocol=SSL\nssl.ca.location={}\nssl.certificate.location={}\n\
             ssl.key.location={}\n",
            certificates.text("ca.pem"),
            certificates.text("admin.pem"),
            certificates.text("admin.key")
        ),
    )
    .unwrap();
    let admin_config = admin_config.to_string_lossy().into_owned();
    let strom_admin = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--command-config", admin_config.as_str()]);
        common::succeeded(
            common::strom(&broker, &all, None),
            &format!("{args:?}"),
            &broker,
        )
    };
    strom_admin(&["topic", "create", "certified"]);
    strom_admin(&[
        "acl",
        "add",
        "--allow-principal",
        "User:ALICE",
        "--operation",
        "Write",
        "--topic",
        "certified",
    ]);
    let produce = |who: &str| {
        let mut command = Command::new("kcat");
        command
            .args([
                "-b",
                &broker.bootstrap(),
                "-P",
                "-t",
                "certified",
                "-p",
                "0",
            ])
            .args(["-X", "security.protocol=SSL"])
            .args([
                "-X",
                &format!("ssl.ca.location={}", certificates.text("ca.pem")),
            ])
            .args([
                "-X",
                &format!(
                    "ssl.certificate.location={}",
                    certificates.text(&format!("{who}.pem"))
                ),
            ])
            .args([
                "-X",
                &format!(
                    "ssl.key.location={}",
                    certificates.text(&format!("{who}.key"))
                ),
            ]);
        run(
            &mut command,
            Some(format!("from {who}\n").as_bytes()),
            DEADLINE,
        )
    };
    let written = produce("alice");
    assert!(
        written.status.success(),
        "{}\n{}",
        stderr(&written),
        broker.log()
    );
    let refused = produce("bob");
    assert!(!refused.status.success(), "bob's certificate wrote");
    assert!(
        stderr(&refused).contains("Topic authorization failed"),
        "{}",
        stderr(&refused)
    );
    let read = strom_admin(&[
        "consume",
        "certified",
        "--from-beginning",
        "--max-messages",
        "1",
    ]);
    assert_eq!(read, "from alice\n");
}

/// The operator APIs check what Kafka checks (DescribeConfigs and
/// IncrementalAlterConfigs DESCRIBE_CONFIGS and ALTER_CONFIGS on the topic
/// or the cluster, CreatePartitions ALTER and DeleteRecords DELETE on the
/// topic, ElectLeaders ALTER on the cluster, OffsetDelete DELETE on the
/// group) and the authorized-operations fields of DescribeTopicPartitions,
/// DescribeCluster and DescribeGroups report what the principal may do,
/// through confluent-kafka's admin client (acl_operator_check.py).
#[test]
fn operator_apis_check_what_kafka_checks_and_authorized_operations_are_real() {
    let (broker, admin) = broker_and_admin(true);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(
        &broker,
        dir,
        "admin",
        &["topic", "create", "orders", "--partitions", "2"],
    );
    let add = |args: &[&str]| {
        let mut all = vec!["acl", "add"];
        all.extend_from_slice(args);
        ok(&broker, dir, "admin", &all);
    };
    for operation in ["Read", "Alter", "Delete", "DescribeConfigs", "AlterConfigs"] {
        add(&[
            "--allow-principal",
            "User:alice",
            "--operation",
            operation,
            "--topic",
            "orders",
        ]);
    }
    add(&[
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--group",
        "billing",
    ]);
    add(&[
        "--allow-principal",
        "User:alice",
        "--operation",
        "Describe",
        "--cluster",
    ]);
    // Share groups of their own: records only from topics they may read.
    for (user, group) in [("User:alice", "alices-share"), ("User:bob", "bobs-share")] {
        add(&[
            "--allow-principal",
            user,
            "--operation",
            "Read",
            "--group",
            group,
        ]);
    }
    // Bob sees the topic (Metadata), and may do nothing else with it.
    add(&[
        "--allow-principal",
        "User:bob",
        "--operation",
        "Describe",
        "--topic",
        "orders",
    ]);
    let refused_before = denials(&admin, "topic") + denials(&admin, "cluster");
    let out = run_python(
        "acl_operator_check.py",
        &[&broker.bootstrap()],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains("ok 23"), "{out}\n{}", broker.log());
    println!("{out}");
    let refused = denials(&admin, "topic") + denials(&admin, "cluster") - refused_before;
    assert!(refused >= 6.0, "{refused} refusals counted");
    // ShareGroupDescribe checks DESCRIBE on the group (READ implies it):
    // alice may ask about billing (no such share group), bob may not.
    let unknown = strom_as(
        &broker,
        dir,
        "alice",
        &["share-group", "describe", "billing"],
    );
    assert!(
        !unknown.status.success() && stderr(&unknown).contains("GROUP_ID_NOT_FOUND"),
        "{}",
        stderr(&unknown)
    );
    let refused = strom_as(&broker, dir, "bob", &["share-group", "describe", "billing"]);
    assert!(
        !refused.status.success() && stderr(&refused).contains("GROUP_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&refused)
    );
    // The share offsets APIs check what Kafka checks: alice (READ on the
    // group and the topic) may set billing's start offsets on orders; bob
    // may not touch the group; a topic alice may not describe is left out
    // of what she is shown.
    ok(&broker, dir, "admin", &["topic", "create", "secret"]);
    let reset = |user: &str, topic: &str| {
        strom_as(
            &broker,
            dir,
            user,
            &[
                "share-group",
                "reset-offsets",
                "billing",
                "--topic",
                topic,
                "--to-earliest",
                "--execute",
            ],
        )
    };
    let done = reset("alice", "orders");
    assert!(done.status.success(), "{}", stderr(&done));
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("billing\torders\t1\t0"),
        "{}",
        String::from_utf8_lossy(&done.stdout)
    );
    let refused = reset("bob", "orders");
    assert!(
        !refused.status.success() && stderr(&refused).contains("GROUP_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&refused)
    );
    let done = reset("admin", "secret");
    assert!(done.status.success(), "{}", stderr(&done));
    let everything = ok(
        &broker,
        dir,
        "admin",
        &["share-group", "describe", "billing"],
    );
    assert!(
        everything.contains("secret\t0\t0") && everything.contains("orders\t1\t0"),
        "{everything}"
    );
    let shown = ok(
        &broker,
        dir,
        "alice",
        &["share-group", "describe", "billing"],
    );
    assert!(
        shown.contains("orders\t1\t0") && !shown.contains("secret"),
        "{shown}"
    );
    // The broker still serves.
    ok(&broker, dir, "admin", &["topic", "describe", "orders"]);
}
