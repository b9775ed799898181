//! Certificates the TLS tests make with `openssl`: a test authority
//! (`ca`), the broker's certificate for 127.0.0.1 and localhost signed by
//! it with its key in one PEM file (`server-keystore.pem`, Kafka's PEM
//! keystore), a client certificate signed by it (`alice`), and one signed
//! by an authority the broker does not trust (`mallory`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::run;

const DEADLINE: Duration = Duration::from_secs(60);

/// The test's certificates, in a directory of their own.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    pub fn make() -> Certificates {
        let dir = tempfile::tempdir().unwrap();
        let certificates = Certificates { dir };
        certificates.authority("ca");
        certificates.authority("stranger-ca");
        certificates.signed(
            "server",
            "localhost",
            "ca",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        );
        certificates.signed("alice", "alice", "ca", "extendedKeyUsage=clientAuth");
        certificates.signed(
            "mallory",
            "mallory",
            "stranger-ca",
            "extendedKeyUsage=clientAuth",
        );
        // Kafka's PEM keystore: the key and the chain in one file.
        let mut keystore = std::fs::read(certificates.path("server.key")).unwrap();
        keystore.extend(std::fs::read(certificates.path("server.pem")).unwrap());
        std::fs::write(certificates.path("server-keystore.pem"), keystore).unwrap();
        certificates
    }

    /// One more client certificate (`NAME.pem`, `NAME.key`) for
    /// `CN=NAME`, signed by the trusted authority.
    pub fn client(&self, name: &str) {
        self.signed(name, name, "ca", "extendedKeyUsage=clientAuth");
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn text(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }

    fn openssl(&self, args: &[&str]) {
        let output = run(
            Command::new("openssl")
                .args(args)
                .current_dir(self.dir.path()),
            None,
            DEADLINE,
        );
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn authority(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=strom test {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn signed(&self, name: &str, common_name: &str, authority: &str, extension: &str) {
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={common_name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        std::fs::write(self.path(&format!("{name}.ext")), format!("{extension}\n")).unwrap();
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-days",
            "2",
            "-CA",
            &format!("{authority}.pem"),
            "-CAkey",
            &format!("{authority}.key"),
            "-CAcreateserial",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
}

/// The JAAS config of PLAIN on the secured cluster's listeners: the
/// brokers' own login (`broker`) and the users they accept.
pub const BROKER_JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"broker\" password=\"broker-secret\" user_broker=\"broker-secret\";";

impl Certificates {
    /// `--set` arguments for [`crate::cluster::Cluster::start_secured`]:
    /// SASL_SSL with PLAIN between brokers and on the controller listener,
    /// each node showing and checking these certificates.
    pub fn secured_cluster_args(&self) -> Vec<String> {
        let listener = crate::cluster::INTER_BROKER_LISTENER.to_ascii_lowercase();
        let mut settings = vec!["sasl.mechanism.inter.broker.protocol=PLAIN".to_string()];
        settings.push("sasl.mechanism.controller.protocol=PLAIN".to_string());
        for name in [listener.as_str(), "controller"] {
            settings.extend([
                format!(
                    "listener.name.{name}.ssl.keystore.location={}",
                    self.text("server-keystore.pem")
                ),
                format!(
                    "listener.name.{name}.ssl.truststore.location={}",
                    self.text("ca.pem")
                ),
                format!("listener.name.{name}.sasl.enabled.mechanisms=PLAIN"),
                format!("listener.name.{name}.plain.sasl.jaas.config={BROKER_JAAS}"),
            ]);
        }
        settings
            .into_iter()
            .flat_map(|setting| ["--set".to_string(), setting])
            .collect()
    }
}

impl Certificates {
    /// A client certificate (`NAME.pem`, `NAME.key`) for `CN=NAME`, signed
    /// by the trusted authority, that expired years ago.
    pub fn expired_client(&self, name: &str) {
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        // `openssl ca` sets the validity dates `openssl x509` cannot.
        std::fs::write(
            self.path("expired-ca.cnf"),
            "[ca]\ndefault_ca = test\n[test]\ndatabase = expired-index.txt\n\
             new_certs_dir = .\ncertificate = ca.pem\nprivate_key = ca.key\n\
             serial = expired-serial\ndefault_md = sha256\npolicy = any\n\
             unique_subject = no\n[any]\ncommonName = supplied\n\
             [client]\nextendedKeyUsage = clientAuth\n",
        )
        .unwrap();
        std::fs::write(self.path("expired-index.txt"), "").unwrap();
        std::fs::write(self.path("expired-serial"), "01\n").unwrap();
        self.openssl(&[
            "ca",
            "-batch",
            "-notext",
            "-config",
            "expired-ca.cnf",
            "-extensions",
            "client",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-in",
            &format!("{name}.csr"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
}
