//! The configuration reference, generated from the code: the broker
//! settings `config::load` accepts, every topic key (storage's
//! `LOG_CONFIG_KEYS` and the broker-applied ones) with its broker-level
//! name and the default the broker runs with, and the consumer group
//! settings. `strom config-reference` prints it; `docs/operations.md`
//! holds a copy that a test keeps identical, and other tests check that
//! every key the code accepts is described here and that the defaults
//! written here are the code's.

use crate::config::{self, Flags};

/// How a default is given.
pub enum Default {
    /// A value `config::load` accepts and that leaves the defaults unchanged.
    Value(&'static str),
    /// Computed or special; described in words.
    Described(&'static str),
}

/// A broker-level setting.
pub struct Setting {
    /// The key, then accepted aliases.
    pub keys: &'static [&'static str],
    /// The command line flag that sets it too, if any.
    pub flag: Option<&'static str>,
    pub default: Default,
    pub meaning: &'static str,
}

pub const BROKER_SETTINGS: &[Setting] = &[
    Setting {
        keys: &["node.id", "broker.id"],
        flag: Some("--node-id"),
        default: Default::Value("0"),
        meaning: "This broker's id; recorded in the data dir's `meta.properties`, which refuses a start under another id.",
    },
    Setting {
        keys: &["listen"],
        flag: Some("--listen"),
        default: Default::Value(config::LISTEN_DEFAULT),
        meaning: "Client listener `HOST:PORT` (`PLAINTEXT://` accepted); every core listens on it with SO_REUSEPORT. Replaces the address of the client listener of `listeners`.",
    },
    Setting {
        keys: &["listeners"],
        flag: None,
        default: Default::Value("PLAINTEXT://127.0.0.1:9092"),
        meaning: "Kafka's listeners: `NAME://HOST:PORT,...`, or a bare `HOST:PORT` for the first client listener. Every listener not named in `controller.listener.names` is a client listener, served on every core at once, each with its own security protocol (by `listener.security.protocol.map`: PLAINTEXT, SSL with the `ssl.*` settings, SASL_PLAINTEXT or SASL_SSL with `sasl.enabled.mechanisms`) and its own settings under `listener.name.<name>.`; for example PLAINTEXT on loopback for operators beside SASL_SSL for applications. A client is told the brokers' addresses on the listener it asked on. The first client listener is the one `--listen`, `--advertise` and the tools name. Two listeners on one address are refused. A voter of a quorum of several opens its controller listener (the one named in `controller.listener.names`) for the other voters and the brokers' heartbeats.",
    },
    Setting {
        keys: &["advertise"],
        flag: Some("--advertise"),
        default: Default::Described("the client listener's address (127.0.0.1 when it is 0.0.0.0)"),
        meaning: "Address given to clients in Metadata responses.",
    },
    Setting {
        keys: &["advertised.listeners"],
        flag: None,
        default: Default::Described("the client listener's address (127.0.0.1 when it is 0.0.0.0)"),
        meaning: "Kafka's advertised listeners: `NAME://HOST:PORT,...` (each name one of `listeners`), or a bare `HOST:PORT` for the client listener. The client listener's entry is the address given to clients in Metadata responses.",
    },
    Setting {
        keys: &["controller.listener.names"],
        flag: None,
        default: Default::Value("CONTROLLER"),
        meaning: "Names of the listeners the controller quorum uses (Kafka's KRaft). Listeners not named here serve clients.",
    },
    Setting {
        keys: &["listener.security.protocol.map"],
        flag: None,
        default: Default::Described("every listener PLAINTEXT"),
        meaning: "Kafka's map of listener names to security protocols, `NAME:PROTOCOL,...`. A listener the map does not name is PLAINTEXT, unless it is named SSL, SASL_PLAINTEXT or SASL_SSL (Kafka's default map gives them those protocols). Strom serves all four on the client listener; a controller listener is PLAINTEXT.",
    },
    Setting {
        keys: &["inter.broker.listener.name", "security.inter.broker.protocol"],
        flag: None,
        default: Default::Described("the first client listener"),
        meaning: "The listener brokers connect to each other on (replication, forwarded requests, admin requests for the active controller): by name, or by Kafka's `security.inter.broker.protocol` (the first listener of that protocol). A name that is not a client listener is refused at start. On an SSL or SASL_SSL listener a broker checks the others' certificates against the listener's `ssl.truststore.location` and shows its own keystore's certificate; on a SASL listener it logs in with `sasl.mechanism.inter.broker.protocol`.",
    },
    Setting {
        keys: &["sasl.mechanism.inter.broker.protocol"],
        flag: None,
        default: Default::Described("none: required when the inter-broker listener is SASL (Kafka's GSSAPI is not served)"),
        meaning: "The SASL mechanism a broker authenticates to the others with: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, one the inter-broker listener enables. The username and password are those of the listener's JAAS login for it, `listener.name.<name>.<mechanism>.sasl.jaas.config` (for PLAIN the same `plain.sasl.jaas.config` that lists the users; for SCRAM `org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" password=\"...\";`, whose credential must be set with `strom user scram set` before the brokers connect to each other over it).",
    },
    Setting {
        keys: &["sasl.mechanism.controller.protocol"],
        flag: None,
        default: Default::Described("none: required when the controller listener is SASL (Kafka's GSSAPI is not served)"),
        meaning: "The SASL mechanism nodes authenticate to the controller listener with: PLAIN (as in Kafka, SCRAM is not served there, since its credentials live in the metadata the controllers carry). The username and password are those of `listener.name.<controller listener>.plain.sasl.jaas.config`, whose `user_NAME` entries are also the users a voter accepts there. A controller listener of protocol SSL or SASL_SSL uses its `ssl.*` settings to serve TLS and to check the voters' certificates. With the authorizer on, only principals allowed CLUSTER_ACTION on the cluster are admitted; a refused node is logged by the voter (`closing controller connection: not admitted`) and never registers.",
    },
    Setting {
        keys: &["sasl.oauthbearer.jwks.endpoint.url"],
        flag: None,
        default: Default::Described("none: OAUTHBEARER takes unsigned tokens (Kafka's unsecured validator, for development; a warning says so at start)"),
        meaning: "OAUTHBEARER's keys: a `file://` URL to a JWKS document (http and https URLs are refused at start). With it, a token's signature (RS256/384/512, PS256/384/512, ES256/384) is checked against the key its `kid` names; a `kid` not in the file makes it be read again, at most once a second, so keys rotate by replacing the file. Also `listener.name.<name>.sasl.oauthbearer.jwks.endpoint.url`; `listener.name.<name>.oauthbearer.sasl.server.callback.handler.class` may name Kafka's OAuthBearerValidatorCallbackHandler (which needs this) or the unsecured one, any other class is refused. Without it, unsigned tokens (`alg: none`) are taken, with the options of `listener.name.<name>.oauthbearer.sasl.jaas.config` (unsecuredValidatorPrincipalClaimName, ...ScopeClaimName, ...RequiredScope, ...AllowableClockSkewMs).",
    },
    Setting {
        keys: &["sasl.oauthbearer.expected.audience"],
        flag: None,
        default: Default::Described("none: any audience"),
        meaning: "Comma-separated audiences a signed OAUTHBEARER token's `aud` must name one of; else SASL_AUTHENTICATION_FAILED.",
    },
    Setting {
        keys: &["sasl.oauthbearer.expected.issuer"],
        flag: None,
        default: Default::Described("none: any issuer"),
        meaning: "The issuer a signed OAUTHBEARER token's `iss` must be.",
    },
    Setting {
        keys: &["sasl.oauthbearer.sub.claim.name"],
        flag: None,
        default: Default::Value("sub"),
        meaning: "The claim an OAUTHBEARER token's principal is read from: the principal is `User:` and its value.",
    },
    Setting {
        keys: &["sasl.oauthbearer.scope.claim.name"],
        flag: None,
        default: Default::Value("scope"),
        meaning: "The claim an OAUTHBEARER token's scope is read from (the unsecured validator's required scope is checked against it).",
    },
    Setting {
        keys: &["sasl.oauthbearer.clock.skew.seconds"],
        flag: None,
        default: Default::Value("30"),
        meaning: "How far an OAUTHBEARER token's `exp`, `nbf` and `iat` may be off this broker's clock. A token's `exp` also bounds its session: with `connections.max.reauth.ms` the client must authenticate again by the earlier of the two.",
    },
    Setting {
        keys: &["sasl.enabled.mechanisms"],
        flag: None,
        default: Default::Described("none (Kafka's GSSAPI is not served)"),
        meaning: "The SASL mechanisms of a SASL_PLAINTEXT or SASL_SSL client listener: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (GSSAPI is refused as not served). May be given per listener as `listener.name.<name>.sasl.enabled.mechanisms`. PLAIN's users come from Kafka's `listener.name.<name>.plain.sasl.jaas.config`: `org.apache.kafka.common.security.plain.PlainLoginModule required user_NAME=\"PASSWORD\" ...;` (its `username` and `password` are skipped). SCRAM's credentials are in the cluster's metadata, set with AlterUserScramCredentials (`strom user scram set`). A client may send only ApiVersions, SaslHandshake and SaslAuthenticate until it authenticates; bad credentials get SASL_AUTHENTICATION_FAILED and the connection closes.",
    },
    Setting {
        keys: &["ssl.keystore.type"],
        flag: None,
        default: Default::Described("PEM"),
        meaning: "The format of the SSL listener's keystore: PEM only (JKS and PKCS12 are refused). Like every `ssl.*` setting it may be given for one listener as `listener.name.<name>.ssl.keystore.type`, which wins.",
    },
    Setting {
        keys: &["ssl.keystore.location"],
        flag: None,
        default: Default::Described("none"),
        meaning: "A PEM file holding the SSL listener's private key (PKCS#8, PKCS#1 or SEC1; an encrypted PKCS#8 key with `ssl.key.password`) and its certificate chain, leaf first. Read at start: a missing file, a key that does not match the certificate, or a file without both is refused naming this setting. Replaced while the broker runs by AlterConfigs on the broker (`strom config alter --broker ID --add-config listener.name.<name>.ssl.keystore.location=FILE`, or kafka-configs.sh): the new file is read and checked first (INVALID_CONFIG, and the keystore in force stays, when it does not serve), then serves every new connection; the same path set again reads a replaced file again; kept in the metadata across restarts.",
    },
    Setting {
        keys: &["ssl.keystore.certificate.chain"],
        flag: None,
        default: Default::Described("none"),
        meaning: "The SSL listener's certificate chain as PEM text, with `ssl.keystore.key`, instead of `ssl.keystore.location`.",
    },
    Setting {
        keys: &["ssl.keystore.key"],
        flag: None,
        default: Default::Described("none"),
        meaning: "The SSL listener's private key as PEM text (encrypted PKCS#8 with `ssl.key.password`, or unencrypted), with `ssl.keystore.certificate.chain`. Shown as [hidden].",
    },
    Setting {
        keys: &["ssl.key.password"],
        flag: None,
        default: Default::Described("none"),
        meaning: "The password of an encrypted PKCS#8 private key (`-----BEGIN ENCRYPTED PRIVATE KEY-----`: PBES2 with PBKDF2 or scrypt and AES, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` and `openssl genpkey -aes256` write). A wrong or missing password is refused at start naming this setting; a key in OpenSSL's legacy encrypted form (`Proc-Type: 4,ENCRYPTED`) is refused with the command that converts it. Shown as [hidden]; never logged.",
    },
    Setting {
        keys: &["ssl.truststore.type"],
        flag: None,
        default: Default::Described("PEM"),
        meaning: "The format of the truststore: PEM only.",
    },
    Setting {
        keys: &["ssl.truststore.location"],
        flag: None,
        default: Default::Described("none"),
        meaning: "A PEM file of the certificate authorities a client certificate must chain to; needed when `ssl.client.auth` is requested or required.",
    },
    Setting {
        keys: &["ssl.truststore.certificates"],
        flag: None,
        default: Default::Described("none"),
        meaning: "The truststore's certificates as PEM text, instead of `ssl.truststore.location`.",
    },
    Setting {
        keys: &["ssl.client.auth"],
        flag: None,
        default: Default::Described("none"),
        meaning: "Whether clients of the SSL listener show a certificate: `none`, `requested` (checked when shown) or `required` (a client without a trusted certificate fails its handshake).",
    },
    Setting {
        keys: &["ssl.enabled.protocols"],
        flag: None,
        default: Default::Described("TLSv1.2,TLSv1.3"),
        meaning: "The TLS versions the SSL listener accepts: TLSv1.2 and TLSv1.3 (older ones are refused).",
    },
    Setting {
        keys: &["ssl.cipher.suites"],
        flag: None,
        default: Default::Described("every suite rustls offers for the enabled protocols"),
        meaning: "The cipher suites the SSL listener accepts, by their IANA names (e.g. `TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`); a name not served is refused, listing those that are.",
    },
    Setting {
        keys: &["ssl.principal.mapping.rules"],
        flag: None,
        default: Default::Described("DEFAULT (the subject as is)"),
        meaning: "How a TLS client certificate names its principal: Kafka's rules `RULE:pattern/replacement/` (an optional `L` or `U` after the last `/` lowers or uppers the result) and `DEFAULT` (the subject as is), separated by commas; the first rule whose pattern matches the certificate's whole subject (RFC 2253: `CN=alice,OU=eng,O=Example`) gives the name, and the principal is `User:<name>`. A certificate no rule applies to is refused.",
    },
    Setting {
        keys: &["process.roles"],
        flag: None,
        default: Default::Value("broker,controller"),
        meaning: "`broker,controller` (a broker that is also a voter of the controller quorum) or `broker` (a broker only: it fetches the metadata from the controllers named by `controller.quorum.voters` or `controller.quorum.bootstrap.servers`). A controller-only node is refused: not supported yet.",
    },
    Setting {
        keys: &["controller.quorum.voters"],
        flag: None,
        default: Default::Described("none: a single node, its own controller"),
        meaning: "The controller quorum, `ID@HOST:PORT,...` (each voter's controller listener). Ids and addresses must be unique, and with the controller role `node.id` must be one of them. Naming other voters makes this node a member of a cluster: the metadata log is replicated by Raft among the voters (kept in `__metadata/raft/`). Without voters, or with this node alone, it is a single node keeping its metadata log in `__metadata/metadata.log`.",
    },
    Setting {
        keys: &["controller.quorum.bootstrap.servers"],
        flag: None,
        default: Default::Described("none"),
        meaning: "Controllers to find the quorum from, `HOST:PORT,...` (Kafka's dynamic quorum), for a broker-only node that is not given `controller.quorum.voters`: it heartbeats to them in turn until the active controller answers.",
    },
    Setting {
        keys: &["broker.rack"],
        flag: None,
        default: Default::Described("none"),
        meaning: "The rack of this broker (Kafka's rack-aware placement). Given to clients in Metadata and DescribeCluster; in a cluster, a partition's replicas go to different racks first.",
    },
    Setting {
        keys: &["admin.listen"],
        flag: Some("--admin-listen"),
        default: Default::Described("`127.0.0.1:9644` (if taken: a warning, no admin listener)"),
        meaning: "Admin HTTP listener (`/metrics`, `/health`, `/ready`, `/status`), or `off`. Set explicitly, failing to bind it stops the start.",
    },
    Setting {
        keys: &["data.dir", "log.dir", "log.dirs"],
        flag: Some("--data-dir"),
        default: Default::Value(config::DATA_DIR_DEFAULT),
        meaning: "Data directory (one): partition logs, the metadata log, `io-properties.toml`.",
    },
    Setting {
        keys: &["cores"],
        flag: Some("--cores"),
        default: Default::Described("every online CPU, or every CPU of `strom.cpuset`"),
        meaning: "Executors, one per core, pinned to CPUs 0..N (or to `strom.cpuset`'s).",
    },
    Setting {
        keys: &["strom.cpuset"],
        flag: Some("--cpuset"),
        default: Default::Described("none: CPUs 0..`cores`"),
        meaning: "The CPUs the executors are pinned to, in order, as Linux lists them (`0-3,8`): several brokers on one host each get CPUs of their own. Each must be online and named once; `cores`, if set, may not exceed their count.",
    },
    Setting {
        keys: &["log.format"],
        flag: Some("--log-format"),
        default: Default::Value("text"),
        meaning: "Log lines on stderr: `text` (one readable line each) or `json` (one JSON object per line, for log shippers). `STROM_LOG` sets the filter.",
    },
    Setting {
        keys: &["strom.metrics.partition.labels"],
        flag: None,
        default: Default::Value("false"),
        meaning: "`/metrics` topic and consumer group series per partition (a `partition` label) instead of per topic: one series per partition and group, mind the cardinality.",
    },
    Setting {
        keys: &["strom.balancer.enable"],
        flag: None,
        default: Default::Value("false"),
        meaning: "Load-balancer mode: clients reach the brokers through one TCP load balancer, whose address every broker gives in `advertised.listeners`. Metadata then lists every broker at that address, and a broker forwards the parts of Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, ShareFetch and ShareAcknowledge requests for partitions another broker leads to that leader over pooled connections, answering the client in its request order. The brokers register `strom.balancer.broker.address` for each other's traffic (replication, forwarding).",
    },
    Setting {
        keys: &["strom.balancer.single.broker"],
        flag: None,
        default: Default::Value("false"),
        meaning: "In load-balancer mode, tell clients of one broker only (the live one with the lowest id, at the balancer's address) and name it as the leader of every partition, the coordinator and the controller. For clients that keep one connection per address and so cannot follow several brokers listed at one address: librdkafka 2.0.2 (Debian 12's kcat) is one; librdkafka 2.16 and the Java client are not.",
    },
    Setting {
        keys: &["strom.balancer.broker.address"],
        flag: None,
        default: Default::Described("the client listener's address (127.0.0.1 when it is 0.0.0.0)"),
        meaning: "`HOST:PORT` at which the other brokers reach this one's client listener (never through the balancer). Registered in load-balancer mode instead of the advertised address; set it when the listener is on 0.0.0.0 and brokers run on different hosts.",
    },
    Setting {
        keys: &["connections.max.reauth.ms"],
        flag: None,
        default: Default::Value("0"),
        meaning: "KIP-368: how long a SASL authentication holds, in milliseconds (0: for the connection's life). SaslAuthenticate tells the client; a client that does not authenticate again on its connection before then (librdkafka from 2.2 and the Java client do) is closed at its next request, and authenticating again as another principal closes the connection. May be given per listener as `listener.name.<name>.connections.max.reauth.ms`.",
    },
    Setting {
        keys: &["authorizer.class.name"],
        flag: None,
        default: Default::Described("none (every client may do everything)"),
        meaning: "`org.apache.kafka.metadata.authorizer.StandardAuthorizer` (or `kafka.security.authorizer.AclAuthorizer`) switches on the built-in authorizer: Kafka's ACL semantics over the ACLs of the cluster's metadata (CreateAcls, `strom acl add`). A client's principal is `User:NAME` after SASL, else `User:ANONYMOUS`. Any other class name is refused.",
    },
    Setting {
        keys: &["super.users"],
        flag: None,
        default: Default::Described("none"),
        meaning: "Principals the authorizer allows everything, separated by `;` (`User:admin;User:ops`).",
    },
    Setting {
        keys: &["allow.everyone.if.no.acl.found"],
        flag: None,
        default: Default::Value("false"),
        meaning: "With the authorizer on, whether a resource no ACL names is open to everyone (Kafka's default, false: only super users).",
    },
    Setting {
        keys: &["auto.create.topics.enable"],
        flag: None,
        default: Default::Value("true"),
        meaning: "Create a topic when a client produces to or asks metadata for one that does not exist.",
    },
    Setting {
        keys: &["num.partitions"],
        flag: None,
        default: Default::Value("1"),
        meaning: "Partitions of an auto-created topic.",
    },
    Setting {
        keys: &["delete.topic.enable"],
        flag: None,
        default: Default::Value("true"),
        meaning: "Whether DeleteTopics is allowed.",
    },
    Setting {
        keys: &["default.replication.factor"],
        flag: None,
        default: Default::Value("1"),
        meaning: "Replicas of a topic created without a replication factor (auto-created topics, CreateTopics with -1). More than the live brokers is refused with INVALID_REPLICATION_FACTOR when a topic is created; a single node has one.",
    },
    Setting {
        keys: &["offsets.topic.replication.factor"],
        flag: None,
        default: Default::Value("3"),
        meaning: "Replicas of `__consumer_offsets` in a cluster, capped by the live brokers when the topic is created (at the first FindCoordinator): a group's coordinator fails over with its committed offsets. A single node has one.",
    },
    Setting {
        keys: &["socket.request.max.bytes"],
        flag: None,
        default: Default::Described("100 MiB + `message.max.bytes`"),
        meaning: "Largest request frame, checked before it is read (other requests than Produce: 8 MiB).",
    },
    Setting {
        keys: &["queued.max.request.bytes"],
        flag: None,
        default: Default::Value("268435456"),
        meaning: "Request bytes the broker buffers at once, being received or handled (a share per core). A connection whose next request does not fit waits, reading nothing; one frame larger than a core's share is admitted when that share is unused, and frames up to 64 KiB are admitted beyond it, one per connection. Kafka's default is unbounded.",
    },
    Setting {
        keys: &["strom.queued.max.response.bytes"],
        flag: None,
        default: Default::Value("268435456"),
        meaning: "Response bytes waiting to be written, for the whole broker (a share per core). While a core's share is used up, each of its connections reads a request only when it has no response waiting, and Fetch answers shrink to one batch.",
    },
    Setting {
        keys: &["strom.connection.queued.max.response.bytes"],
        flag: None,
        default: Default::Value("67108864"),
        meaning: "Response bytes waiting to be written on one connection. Past it the connection reads no more requests until the client takes its answers; Fetch answers are sized to what it may still hold.",
    },
    Setting {
        keys: &["connections.max.idle.ms"],
        flag: None,
        default: Default::Value("600000"),
        meaning: "A connection that neither sends nor takes a byte for this long is closed.",
    },
    Setting {
        keys: &["strom.request.receive.timeout.ms"],
        flag: None,
        default: Default::Value("30000"),
        meaning: "A request whose frame has not all arrived this long after it was admitted closes its connection (stalled or trickled frames give their budget back).",
    },
    Setting {
        keys: &["strom.io.memory.bytes"],
        flag: None,
        default: Default::Described("glommio's 10 MiB"),
        meaning: "io_uring registered memory per executor; counts against RLIMIT_MEMLOCK without CAP_IPC_LOCK (keep it at least 1 MiB).",
    },
    Setting {
        keys: &["strom.spin.before.park.us"],
        flag: None,
        default: Default::Value("0"),
        meaning: "Microseconds an idle executor keeps polling before it parks (0 to 10000): spinning trades CPU time for the wake-up latency of a parked core.",
    },
    Setting {
        keys: &["strom.journal.chunk.bytes.max"],
        flag: None,
        default: Default::Value("134217728"),
        meaning: "The most each of a core's two journal chunk files grows to (1 MiB to 1 GiB). A journal starts with 4 MiB chunks and doubles the next chunk whenever one fills within 10 s, so an idle broker keeps 8 MiB of journal per core on disk and a busy one up to twice this.",
    },
    Setting {
        keys: &[crate::config::io_properties::PATH_KEY],
        flag: None,
        default: Default::Described("`<data dir>/io-properties.toml` when it exists"),
        meaning: "The file from `strom-tune iotune` whose `[io]` table sets `strom.write.bytes` and `strom.writes.inflight` unless the config does.",
    },
    Setting {
        keys: &["transaction.state.log.num.partitions"],
        flag: None,
        default: Default::Value("50"),
        meaning: "Partitions of `__transaction_state`, created on the first transactional request; each transactional id belongs to one, whose leader coordinates it.",
    },
    Setting {
        keys: &["transaction.state.log.replication.factor"],
        flag: None,
        default: Default::Value("3"),
        meaning: "Replicas of `__transaction_state` in a cluster, capped by the live brokers when it is created (one on a single node).",
    },
    Setting {
        keys: &["transaction.state.log.min.isr"],
        flag: None,
        default: Default::Value("2"),
        meaning: "`min.insync.replicas` of `__transaction_state` (capped by its replication factor).",
    },
    Setting {
        keys: &["transaction.max.timeout.ms"],
        flag: None,
        default: Default::Value("900000"),
        meaning: "The longest `transaction.timeout.ms` a producer may ask for; InitProducerId asking for more is INVALID_TRANSACTION_TIMEOUT.",
    },
    Setting {
        keys: &["transactional.id.expiration.ms"],
        flag: None,
        default: Default::Value("604800000"),
        meaning: "A transactional id with no transaction this long is removed (a tombstone in `__transaction_state`).",
    },
    Setting {
        keys: &["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
        flag: None,
        default: Default::Value("10000"),
        meaning: "How often each coordinator aborts the transactions open longer than their timeout (fencing their producer).",
    },
    Setting {
        keys: &["log.cleaner.enable"],
        flag: None,
        default: Default::Value("true"),
        meaning: "Whether each core's cleaner compacts the logs of topics with `cleanup.policy` `compact` (or `compact,delete`) it owns.",
    },
    Setting {
        keys: &["log.cleaner.backoff.ms"],
        flag: None,
        default: Default::Value("15000"),
        meaning: "How often each core's cleaner looks for a log to clean when none was due.",
    },
    Setting {
        keys: &["log.cleaner.dedupe.buffer.size"],
        flag: None,
        default: Default::Value("134217728"),
        meaning: "Memory for the cleaners' key maps, shared by the cores (about 40 bytes a key); a log whose dirty part has more keys than a core's share is cleaned in several passes.",
    },
    Setting {
        keys: &["log.cleaner.io.max.bytes.per.second"],
        flag: None,
        default: Default::Value("1.7976931348623157E308"),
        meaning: "What the cleaners of all cores read and write at most per second, together (each core takes its share), so cleaning leaves the disk to produce and fetch.",
    },
    Setting {
        keys: &["log.retention.check.interval.ms"],
        flag: None,
        default: Default::Value("300000"),
        meaning: "How often each core applies retention to its partitions.",
    },
    Setting {
        keys: &["broker.session.timeout.ms"],
        flag: None,
        default: Default::Value("9000"),
        meaning: "In a cluster, a broker whose heartbeats the active controller has not heard for this long is fenced: it is listed nowhere and leads nothing (Kafka's default).",
    },
    Setting {
        keys: &["broker.heartbeat.interval.ms"],
        flag: None,
        default: Default::Value("2000"),
        meaning: "In a cluster, how often a broker heartbeats to the active controller (Kafka's default). Keep it well below `broker.session.timeout.ms`.",
    },
    Setting {
        keys: &["replica.lag.time.max.ms"],
        flag: None,
        default: Default::Value("30000"),
        meaning: "A follower that has not caught up with its leader's log end for this long is taken out of the partition's ISR by the leader (through the active controller); it comes back once it has caught up to the high watermark (Kafka's default).",
    },
    Setting {
        keys: &["auto.leader.rebalance.enable"],
        flag: None,
        default: Default::Value("true"),
        meaning: "In a cluster, the active controller moves each partition's leadership back to its first (preferred) replica once that replica is live and in sync, every `leader.imbalance.check.interval.seconds` (Kafka's default). `strom topic elect-leaders` (ElectLeaders) does it on demand.",
    },
    Setting {
        keys: &["leader.imbalance.check.interval.seconds"],
        flag: None,
        default: Default::Value("300"),
        meaning: "How often the active controller looks for partitions not led by their preferred replica (Kafka's default).",
    },
    Setting {
        keys: &["controller.quorum.election.timeout.ms"],
        flag: None,
        default: Default::Value("1000"),
        meaning: "A voter that hears from no leader for a random time between this and twice this starts an election (Kafka's default). The quorum ticks every tenth of it.",
    },
    Setting {
        keys: &["strom.metadata.snapshot.bytes"],
        flag: None,
        default: Default::Value("16777216"),
        meaning: "In a cluster, a voter snapshots the metadata image (an rkyv archive) once this many bytes of metadata log were applied since its last snapshot, and drops the log behind it. A voter or broker too far behind gets the snapshot.",
    },
    Setting {
        keys: &["producer.id.expiration.ms"],
        flag: None,
        default: Default::Value("86400000"),
        meaning: "How long a producer may stay idle before a partition drops its idempotence state (then a batch continuing its sequence gets UNKNOWN_PRODUCER_ID). State survives restarts in `.snapshot` files.",
    },
    Setting {
        keys: &["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
        flag: None,
        default: Default::Value("604800000"),
        meaning: "Default `retention.ms` (the most precise unit given wins; negative keeps everything).",
    },
    Setting {
        keys: &["log.roll.ms", "log.roll.hours"],
        flag: None,
        default: Default::Value("604800000"),
        meaning: "Default `segment.ms` (the most precise unit given wins).",
    },
];

/// A topic key, the broker-level key that sets its default (none for
/// Kafka's topic-only keys), and what it is.
pub struct TopicSetting {
    pub topic_key: &'static str,
    pub broker_key: Option<&'static str>,
    pub meaning: &'static str,
}

/// How the meaning of a topic key Strom does not act on begins.
pub const WITHOUT_EFFECT: &str =
    "No effect in Strom (accepted, kept and described, as Kafka clients set it):";

pub const TOPIC_SETTINGS: &[TopicSetting] = &[
    TopicSetting {
        topic_key: "segment.bytes",
        broker_key: Some("log.segment.bytes"),
        meaning: "Roll the active segment past this size.",
    },
    TopicSetting {
        topic_key: "segment.ms",
        broker_key: Some("log.roll.ms"),
        meaning: "Roll once the active segment's first record is this old (by record time).",
    },
    TopicSetting {
        topic_key: "segment.index.bytes",
        broker_key: Some("log.index.size.max.bytes"),
        meaning: "Roll when the offset index reaches this size.",
    },
    TopicSetting {
        topic_key: "index.interval.bytes",
        broker_key: Some("log.index.interval.bytes"),
        meaning: "Bytes between sparse index entries.",
    },
    TopicSetting {
        topic_key: "retention.ms",
        broker_key: Some("log.retention.ms"),
        meaning: "Delete whole segments whose newest record is older; -1 keeps all.",
    },
    TopicSetting {
        topic_key: "retention.bytes",
        broker_key: Some("log.retention.bytes"),
        meaning: "Delete the oldest segments while the log is larger; -1 keeps all.",
    },
    TopicSetting {
        topic_key: "max.message.bytes",
        broker_key: Some("message.max.bytes"),
        meaning: "Largest record batch accepted.",
    },
    TopicSetting {
        topic_key: "flush.policy",
        broker_key: Some("log.flush.policy"),
        meaning: "`always`: sync (see `strom.flush.scope`) before acknowledging acks=all (group commit); `interval`: by `flush.ms`/`flush.bytes`; `never`: on roll and close only.",
    },
    TopicSetting {
        topic_key: "flush.ms",
        broker_key: Some("log.flush.interval.ms"),
        meaning: "Sync when the oldest unsynced append is this old (0: every append).",
    },
    TopicSetting {
        topic_key: "flush.messages",
        broker_key: Some("log.flush.interval.messages"),
        meaning: "1 (or 0): sync every append; larger values keep the current policy.",
    },
    TopicSetting {
        topic_key: "flush.bytes",
        broker_key: Some("log.flush.interval.bytes"),
        meaning: "Sync when this many bytes are unsynced (0: every append).",
    },
    TopicSetting {
        topic_key: "strom.flush.scope",
        broker_key: Some("strom.flush.scope"),
        meaning: "How a sync is done: `filesystem` (one `syncfs` shared by every partition of a core on that filesystem, so many partitions cost one device flush per round; it also writes back anything else dirty on that filesystem: give the data dir its own) or `file` (fdatasync of each partition's segment).",
    },
    TopicSetting {
        topic_key: "strom.cache.bytes",
        broker_key: Some("strom.cache.bytes"),
        meaning: "Recent batches kept in memory per partition for tailing readers.",
    },
    TopicSetting {
        topic_key: "strom.write.bytes",
        broker_key: Some("strom.write.bytes"),
        meaning: "Largest single O_DIRECT write (a multiple of 4096); `io-properties.toml` may set the default.",
    },
    TopicSetting {
        topic_key: "strom.writes.inflight",
        broker_key: Some("strom.writes.inflight"),
        meaning: "O_DIRECT writes in flight at once per partition (1 to 64); `io-properties.toml` may set the default.",
    },
    TopicSetting {
        topic_key: "strom.pending.bytes",
        broker_key: Some("strom.pending.bytes"),
        meaning: "Appended but unwritten bytes per partition before appends wait (backpressure).",
    },
    TopicSetting {
        topic_key: "strom.preallocate.bytes",
        broker_key: Some("strom.preallocate.bytes"),
        meaning: "Smallest step by which segment files are grown with fallocate ahead of the writer; the step is a quarter of what the segment holds, between this and 64 MiB.",
    },
    TopicSetting {
        topic_key: "strom.journal.bytes",
        broker_key: Some("strom.journal.bytes"),
        meaning: "Under `flush.policy=always`, a partition with at most twice this not yet durable (0 to 8 MiB; 0 = off) makes those bytes durable through its core's journal, one write per sync round for all such partitions, and writes its segment file later in larger writes, once four times this is unwritten (with many partitions on a core, once its share of 16 MiB is, but at least this).",
    },
    TopicSetting {
        topic_key: "cleanup.policy",
        broker_key: Some("log.cleanup.policy"),
        meaning: "`delete` (retention removes whole old segments), `compact` (each core's cleaner keeps the latest record of every key; records without a key are refused with INVALID_RECORD), or both: `compact,delete`.",
    },
    TopicSetting {
        topic_key: "compression.type",
        broker_key: Some("compression.type"),
        meaning: "`producer`: batches are stored as the producer compressed them; `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`: a batch in another codec is recompressed on the broker (records, offsets, timestamps and producer id, epoch and sequence unchanged; new length and CRC).",
    },
    TopicSetting {
        topic_key: "compression.gzip.level",
        broker_key: Some("compression.gzip.level"),
        meaning: "Level of the broker's gzip recompression: 1 to 9, or -1 for the codec's default (6).",
    },
    TopicSetting {
        topic_key: "compression.lz4.level",
        broker_key: Some("compression.lz4.level"),
        meaning: "Level of the broker's lz4 recompression: 1 to 17.",
    },
    TopicSetting {
        topic_key: "compression.zstd.level",
        broker_key: Some("compression.zstd.level"),
        meaning: "Level of the broker's zstd recompression: -131072 to 22.",
    },
    TopicSetting {
        topic_key: "message.timestamp.type",
        broker_key: Some("log.message.timestamp.type"),
        meaning: "`CreateTime` or `LogAppendTime`.",
    },
    TopicSetting {
        topic_key: "min.insync.replicas",
        broker_key: Some("min.insync.replicas"),
        meaning: "In-sync replicas an `acks=all` produce needs: with fewer in the ISR it is refused with NOT_ENOUGH_REPLICAS (or answered NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank while it waited). More than the replication factor makes every `acks=all` produce fail, as in Kafka.",
    },
    TopicSetting {
        topic_key: "unclean.leader.election.enable",
        broker_key: Some("unclean.leader.election.enable"),
        meaning: "When a partition's leader is fenced and no other in-sync replica is live, `true` lets a live replica that is not in sync lead (records only the old leader had are lost: availability over the guarantee); `false` leaves the partition without a leader until an in-sync replica returns.",
    },
    TopicSetting {
        topic_key: "segment.jitter.ms",
        broker_key: Some("log.roll.jitter.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): segments roll at `segment.ms` without jitter.",
    },
    TopicSetting {
        topic_key: "delete.retention.ms",
        broker_key: Some("log.cleaner.delete.retention.ms"),
        meaning: "How long a tombstone (a record with a null value) of a compacted topic stays after the cleaning that first saw it; a later cleaning removes it.",
    },
    TopicSetting {
        topic_key: "min.compaction.lag.ms",
        broker_key: Some("log.cleaner.min.compaction.lag.ms"),
        meaning: "Records younger than this stay uncleaned: only segments whose newest record is older are cleaned.",
    },
    TopicSetting {
        topic_key: "max.compaction.lag.ms",
        broker_key: Some("log.cleaner.max.compaction.lag.ms"),
        meaning: "A compacted log with dirty records is cleaned at the latest this long after its last cleaning, whatever its dirty ratio.",
    },
    TopicSetting {
        topic_key: "min.cleanable.dirty.ratio",
        broker_key: Some("log.cleaner.min.cleanable.ratio"),
        meaning: "A compacted log is cleaned once this share of its cleanable bytes (sealed segments below the high watermark) has not been cleaned yet; the dirtiest log of a core goes first.",
    },
    TopicSetting {
        topic_key: "file.delete.delay.ms",
        broker_key: Some("log.segment.delete.delay.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): retention deletes a segment's files at once.",
    },
    TopicSetting {
        topic_key: "preallocate",
        broker_key: Some("log.preallocate"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): segment files are always grown ahead of the writer (see `strom.preallocate.bytes`).",
    },
    TopicSetting {
        topic_key: "message.format.version",
        broker_key: Some("log.message.format.version"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): records are stored in the v2 format only, as Kafka 4 does.",
    },
    TopicSetting {
        topic_key: "message.timestamp.difference.max.ms",
        broker_key: Some("log.message.timestamp.difference.max.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): records are not refused by timestamp.",
    },
    TopicSetting {
        topic_key: "message.timestamp.before.max.ms",
        broker_key: Some("log.message.timestamp.before.max.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): records are not refused by timestamp.",
    },
    TopicSetting {
        topic_key: "message.timestamp.after.max.ms",
        broker_key: Some("log.message.timestamp.after.max.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): records are not refused by timestamp.",
    },
    TopicSetting {
        topic_key: "message.downconversion.enable",
        broker_key: Some("log.message.downconversion.enable"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): records are never down-converted, as in Kafka 4.",
    },
    TopicSetting {
        topic_key: "leader.replication.throttled.replicas",
        broker_key: None,
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): replication is not throttled.",
    },
    TopicSetting {
        topic_key: "follower.replication.throttled.replicas",
        broker_key: None,
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): replication is not throttled.",
    },
    TopicSetting {
        topic_key: "remote.storage.enable",
        broker_key: None,
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): tiered storage is not supported, so only `false` is accepted (as by Kafka without `remote.log.storage.system.enable`).",
    },
    TopicSetting {
        topic_key: "local.retention.ms",
        broker_key: Some("log.local.retention.ms"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): a tiered storage setting; `retention.ms` applies to the whole log.",
    },
    TopicSetting {
        topic_key: "local.retention.bytes",
        broker_key: Some("log.local.retention.bytes"),
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): a tiered storage setting; `retention.bytes` applies to the whole log.",
    },
    TopicSetting {
        topic_key: "remote.log.copy.disable",
        broker_key: None,
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): a tiered storage setting; Strom keeps every segment local.",
    },
    TopicSetting {
        topic_key: "remote.log.delete.on.disable",
        broker_key: None,
        meaning: "No effect in Strom (accepted, kept and described, as Kafka clients set it): a tiered storage setting; Strom keeps every segment local.",
    },
];

/// A consumer group setting (`::groups::config::GROUP_CONFIG_KEYS`).
pub struct GroupSetting {
    pub key: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

pub const GROUP_SETTINGS: &[GroupSetting] = &[
    GroupSetting {
        key: "group.initial.rebalance.delay.ms",
        default: "3000",
        meaning: "How long the first rebalance of an empty group waits for more members.",
    },
    GroupSetting {
        key: "group.max.size",
        default: "1000",
        meaning: "Most members in one group.",
    },
    GroupSetting {
        key: "group.min.session.timeout.ms",
        default: "6000",
        meaning: "Shortest session timeout a member may ask for.",
    },
    GroupSetting {
        key: "group.max.session.timeout.ms",
        default: "1800000",
        meaning: "Longest session timeout a member may ask for.",
    },
    GroupSetting {
        key: "offsets.topic.num.partitions",
        default: "50",
        meaning:
            "Partitions of `__consumer_offsets` (groups are spread over them, and so over cores).",
    },
    GroupSetting {
        key: "offsets.retention.minutes",
        default: "10080",
        meaning: "How long committed offsets of an empty group are kept.",
    },
    GroupSetting {
        key: "group.consumer.session.timeout.ms",
        default: "45000",
        meaning: "Session timeout of members of consumer-protocol groups (`group.protocol=consumer`): a member silent this long leaves the group.",
    },
    GroupSetting {
        key: "group.consumer.min.session.timeout.ms",
        default: "45000",
        meaning: "Lower bound of `group.consumer.session.timeout.ms`.",
    },
    GroupSetting {
        key: "group.consumer.max.session.timeout.ms",
        default: "60000",
        meaning: "Upper bound of `group.consumer.session.timeout.ms`.",
    },
    GroupSetting {
        key: "group.consumer.heartbeat.interval.ms",
        default: "5000",
        meaning: "How often members of consumer-protocol groups heartbeat (the coordinator tells them).",
    },
    GroupSetting {
        key: "group.consumer.min.heartbeat.interval.ms",
        default: "5000",
        meaning: "Lower bound of `group.consumer.heartbeat.interval.ms`.",
    },
    GroupSetting {
        key: "group.consumer.max.heartbeat.interval.ms",
        default: "15000",
        meaning: "Upper bound of `group.consumer.heartbeat.interval.ms`.",
    },
    GroupSetting {
        key: "group.consumer.max.size",
        default: "1000",
        meaning: "Most members in one consumer-protocol group.",
    },
    GroupSetting {
        key: "group.consumer.assignors",
        default: "uniform,range",
        meaning: "Server-side assignors consumer-protocol members may name (`group.remote.assignor`), the first the default: `uniform` (balanced and sticky) and `range` (per topic, contiguous ranges).",
    },
    GroupSetting {
        key: "group.consumer.migration.policy",
        default: "bidirectional",
        meaning: "Whether a group switches protocols while it has members: `upgrade` (a classic group turns consumer when a consumer-protocol member joins), `downgrade` (back to classic when its last consumer-protocol member leaves and classic members remain), `bidirectional` (both) or `disabled` (neither; the other kind is refused).",
    },
    GroupSetting {
        key: "group.share.session.timeout.ms",
        default: "45000",
        meaning: "Session timeout of share group members (KIP-932): a member silent this long leaves the group.",
    },
    GroupSetting {
        key: "group.share.heartbeat.interval.ms",
        default: "5000",
        meaning: "How often share group members heartbeat (the coordinator tells them).",
    },
    GroupSetting {
        key: "group.share.max.size",
        default: "200",
        meaning: "Most members in one share group.",
    },
    GroupSetting {
        key: "group.share.record.lock.duration.ms",
        default: "30000",
        meaning: "How long a share group member holds a record it acquired before the record is available again (1000 to 3600000).",
    },
    GroupSetting {
        key: "group.share.delivery.count.limit",
        default: "5",
        meaning: "Deliveries of a record to a share group before it is archived unaccepted (2 to 10).",
    },
    GroupSetting {
        key: "group.share.partition.max.record.locks",
        default: "2000",
        meaning: "Records of one share partition acquired at once at most (100 to 10000).",
    },
];

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The reference as Markdown (the generated part of docs/operations.md).
pub fn render() -> String {
    let defaults = config::load(&Flags::default())
        .expect("the embedded defaults are a valid configuration")
        .topic_defaults;
    let mut out = String::new();
    out.push_str("### Broker settings\n\n");
    out.push_str("| key | flag | default | meaning |\n|---|---|---|---|\n");
    for setting in BROKER_SETTINGS {
        let keys: Vec<String> = setting.keys.iter().map(|k| format!("`{k}`")).collect();
        let default = match setting.default {
            Default::Value(value) => format!("`{value}`"),
            Default::Described(text) => text.to_string(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            keys.join(", "),
            setting.flag.map_or(String::new(), |f| format!("`{f}`")),
            cell(&default),
            cell(setting.meaning)
        ));
    }
    out.push_str("\n### Topic settings\n\n");
    out.push_str(
        "Per topic (CreateTopics, AlterConfigs, IncrementalAlterConfigs) by the topic key; \
         the broker key sets the default for every topic.\n\n",
    );
    out.push_str("| topic key | broker key | default | meaning |\n|---|---|---|---|\n");
    for setting in TOPIC_SETTINGS {
        let default = defaults.get(setting.topic_key).unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            setting.topic_key,
            setting
                .broker_key
                .map_or("(topic only)".to_string(), |key| format!("`{key}`")),
            if default.is_empty() {
                "(empty)".to_string()
            } else {
                format!("`{default}`")
            },
            cell(setting.meaning)
        ));
    }
    out.push_str(
        "\nThe broker keys of this table, `log.retention.minutes`, `log.retention.hours`, \
         `log.roll.hours` and `log.retention.check.interval.ms` are dynamic: \
         IncrementalAlterConfigs or AlterConfigs on the BROKER resource of the node id, or \
         on `\"\"` for the cluster-wide default (`strom config alter --broker [ID] | \
         --broker-defaults`), change them while the broker runs, every topic without its \
         own value follows at once, and the change is kept in the metadata log. A node's \
         value wins over the cluster-wide default, which wins over the configuration file \
         and flags. Every other broker setting is read-only there (INVALID_REQUEST).\n",
    );
    out.push_str("\n### Consumer groups\n\n");
    out.push_str("| key | default | meaning |\n|---|---|---|\n");
    for setting in GROUP_SETTINGS {
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            setting.key,
            setting.default,
            cell(setting.meaning)
        ));
    }
    out.push_str("\n### Per-group settings\n\n");
    out.push_str(
        "Per consumer group, as the GROUP config resource (DescribeConfigs, \
         IncrementalAlterConfigs, AlterConfigs), kept in the metadata log.\n\n",
    );
    out.push_str("| key | default | range | meaning |\n|---|---|---|---|\n");
    for key in crate::config::dynamic::GROUP_KEYS {
        let range = key
            .range
            .map_or(String::new(), |(low, high)| format!("{low} to {high}"));
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            key.name,
            key.default,
            range,
            cell(key.meaning)
        ));
    }
    out
}

/// Every key a reader of the reference may set at broker level.
pub fn documented_broker_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = BROKER_SETTINGS
        .iter()
        .flat_map(|s| s.keys.iter().copied())
        .collect();
    keys.extend(TOPIC_SETTINGS.iter().filter_map(|s| s.broker_key));
    keys.extend(GROUP_SETTINGS.iter().map(|s| s.key));
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(settings: &[(&str, &str)]) -> Result<config::BrokerConfig, config::ConfigError> {
        config::load(&config::flags_with(settings))
    }

    #[test]
    fn every_topic_key_is_documented_once_with_its_broker_name() {
        let mut documented: Vec<&str> = TOPIC_SETTINGS.iter().map(|s| s.topic_key).collect();
        let mut code: Vec<&str> = crate::topic_config::topic_keys().collect();
        documented.sort_unstable();
        code.sort_unstable();
        assert_eq!(documented, code, "TOPIC_SETTINGS must list every topic key");
        for setting in TOPIC_SETTINGS {
            // What Strom does not act on says so first.
            assert_eq!(
                setting.meaning.starts_with(WITHOUT_EFFECT),
                !crate::topic_config::has_effect(setting.topic_key),
                "{}: {}",
                setting.topic_key,
                setting.meaning
            );
            let Some(broker_key) = setting.broker_key else {
                // Kafka has these at topic level only.
                assert!(!crate::topic_config::has_effect(setting.topic_key));
                continue;
            };
            let mapped = crate::topic_config::topic_key_for_broker_key(broker_key);
            // Time keys in several units are handled by config.rs itself.
            let special = matches!(broker_key, "log.roll.ms" | "log.retention.ms");
            assert!(
                mapped == Some(setting.topic_key) || special,
                "{} does not set {}",
                broker_key,
                setting.topic_key
            );
            load(&[(
                broker_key,
                &crate::topic_config::TopicDefaults::new()
                    .get(setting.topic_key)
                    .unwrap(),
            )])
            .unwrap_or_else(|e| panic!("{}: {e}", broker_key));
        }
    }

    #[test]
    fn documented_broker_defaults_are_the_code_defaults() {
        let defaults = format!("{:?}", load(&[]).unwrap());
        for setting in BROKER_SETTINGS {
            // Aliases may be in other units (log.retention.hours): the
            // default is written for the first key.
            let key = setting.keys[0];
            if let Default::Value(value) = setting.default {
                let mut config = load(&[(key, value)]).unwrap_or_else(|e| panic!("{key}: {e}"));
                // What was given differs; what it gives must not.
                config.given.clear();
                assert_eq!(
                    format!("{config:?}"),
                    defaults,
                    "{key}={value} is not the default"
                );
            }
            for alias in setting.keys {
                assert!(
                    !matches!(
                        load(&[(alias, "")]),
                        Err(config::ConfigError::UnknownKey { .. })
                    ),
                    "{alias} is documented but unknown"
                );
            }
        }
    }

    #[test]
    fn documented_group_defaults_are_the_code_defaults() {
        let mut keys: Vec<&str> = GROUP_SETTINGS.iter().map(|s| s.key).collect();
        let mut code = ::groups::config::GROUP_CONFIG_KEYS.to_vec();
        keys.sort_unstable();
        code.sort_unstable();
        assert_eq!(keys, code, "GROUP_SETTINGS must list every group key");
        for setting in GROUP_SETTINGS {
            let mut config = ::groups::config::GroupConfig::default();
            config.set(setting.key, setting.default).unwrap();
            assert_eq!(
                config,
                ::groups::config::GroupConfig::default(),
                "{}={} is not the default",
                setting.key,
                setting.default
            );
        }
    }

    /// The keys named in `Builder::apply`'s match arms, read from the
    /// source, so a key added there without documentation fails here.
    #[test]
    fn every_key_config_rs_accepts_is_documented() {
        let source = include_str!("mod.rs");
        let start = source.find("fn apply(").expect("Builder::apply");
        let end = source[start..]
            .find("\n    fn ")
            .map_or(source.len(), |e| start + e);
        let body = &source[start..end];
        let documented = documented_broker_keys();
        let mut found = 0;
        for (i, _) in body.match_indices('"') {
            // A string literal followed by `=>` or `|` is a match arm key.
            let Some(close) = body[i + 1..].find('"') else {
                break;
            };
            let literal = &body[i + 1..i + 1 + close];
            let after = body[i + 2 + close..].trim_start();
            let is_key = !literal.is_empty()
                && literal
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_')
                && (after.starts_with("=>") || after.starts_with('|'));
            if is_key {
                found += 1;
                assert!(
                    documented.contains(&literal),
                    "config/mod.rs accepts `{literal}` but config/reference.rs does not document it"
                );
            }
        }
        assert!(
            found >= 20,
            "the scan found only {found} keys: has config.rs changed shape?"
        );
    }

    #[test]
    fn the_operations_doc_holds_the_generated_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
        let doc = std::fs::read_to_string(path).expect("docs/operations.md");
        let begin = "<!-- BEGIN config-reference: generated by `strom config-reference` -->\n";
        let end = "<!-- END config-reference -->";
        let from = doc.find(begin).expect("begin marker") + begin.len();
        let to = doc.find(end).expect("end marker");
        assert!(
            doc[from..to] == render(),
            "docs/operations.md differs from the code: regenerate it with\n  \
             cargo run --bin strom -- config-reference\nand paste it between the markers"
        );
    }
}
