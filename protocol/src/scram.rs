//! SCRAM (RFC 5802 with RFC 7677's SHA-256, and SHA-512) as Kafka speaks
//! it in SASL: the mechanisms SCRAM-SHA-256 and SCRAM-SHA-512, the keys a
//! broker keeps for a user (the salt, the iteration count, StoredKey and
//! ServerKey: never the password), and both sides of the exchange.
//!
//! The exchange is three messages: the client's first (`n,,n=USER,r=CNONCE`),
//! the server's first (`r=CNONCE SNONCE,s=SALT,i=ITERATIONS`), the client's
//! final (`c=biws,r=NONCE,p=PROOF`), answered by the server's final
//! (`v=SIGNATURE`). Channel binding is not offered (Kafka offers none);
//! an authorization id, when given, must name the user itself.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

/// The iteration counts Kafka accepts for a credential.
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;
/// Random bytes in a nonce (before base64).
const NONCE_BYTES: usize = 24;

/// A SCRAM mechanism; its type id is Kafka's `ScramMechanism` (0 unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// Kafka's type id: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    pub fn type_id(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_type_id(id: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.type_id() == id)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// Hi(password, salt, iterations): the salted password a client sends
    /// in AlterUserScramCredentials. `iterations` must be positive.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.digest().output_len()];
        let iterations = std::num::NonZeroU32::new(iterations).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), iterations, salt, password, &mut out);
        out
    }

    /// The keys a broker keeps for a salted password.
    pub fn keys(self, salted_password: &[u8]) -> Keys {
        let client_key = self.mac(salted_password, b"Client Key");
        Keys {
            stored_key: self.hash(&client_key),
            server_key: self.mac(salted_password, b"Server Key"),
        }
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }
}

/// What a broker keeps of a user's salted password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// A user's credential as the server looks it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub keys: Keys,
}

/// A fresh nonce: random bytes as base64 (printable, never a comma).
pub fn nonce() -> String {
    STANDARD.encode(random_bytes(NONCE_BYTES))
}

/// `len` bytes from the system's random source (a salt, a nonce).
pub fn random_bytes(len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source never fails on Linux");
    bytes
}

/// Whether `a` equals `b`, in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// A user name in a SCRAM message: `,` and `=` escaped as `=2C`, `=3D`.
fn encode_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn decode_name(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        match escape {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(format!("a bad escape in the user name {name:?}")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `key` (`k=value`), if `part` is it.
fn attribute(part: &str, key: char) -> Option<&str> {
    let mut chars = part.chars();
    (chars.next() == Some(key) && chars.next() == Some('=')).then(|| &part[2..])
}

/// The server's side of one exchange, between its two answers.
pub struct ServerExchange {
    mechanism: Mechanism,
    user: String,
    gs2_header: String,
    /// The client's nonce, then the server's.
    nonce: String,
    client_nonce_len: usize,
    client_first_bare: String,
    server_first: String,
    keys: Keys,
}

impl ServerExchange {
    /// The mechanism of this exchange.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Reads the client's first message, looks the user up with
    /// `credential`, and answers with the server's first message; else
    /// why the authentication fails (for the log).
    pub fn start(
        mechanism: Mechanism,
        client_first: &[u8],
        credential: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<(ServerExchange, Vec<u8>), String> {
        let text = std::str::from_utf8(client_first)
            .map_err(|_| "the client's first message is not UTF-8".to_string())?;
        let mut parts = text.splitn(3, ',');
        let (Some(flag), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("a malformed client-first message".to_string());
        };
        match flag {
            "n" | "y" => {}
            _ if flag.starts_with("p=") => {
                return Err("the client asks for channel binding, which is not offered".to_string())
            }
            _ => return Err(format!("a malformed channel-binding flag {flag:?}")),
        }
        let mut attributes = bare.split(',');
        let user = match attributes.next().and_then(|p| attribute(p, 'n')) {
            Some(name) => decode_name(name)?,
            None => return Err("the client-first message names no user".to_string()),
        };
        let Some(client_nonce) = attributes.next().and_then(|p| attribute(p, 'r')) else {
            return Err("the client-first message has no nonce".to_string());
        };
        if client_nonce.is_empty() {
            return Err("the client's nonce is empty".to_string());
        }
        for extension in attributes {
            if extension.starts_with("tokenauth=") {
                return Err("delegation tokens are not served".to_string());
            }
            if extension.starts_with("m=") {
                return Err("a mandatory extension is not served".to_string());
            }
        }
        if !authzid.is_empty() {
            let asked = attribute(authzid, 'a')
                .map(decode_name)
                .transpose()?
                .unwrap_or_default();
            if asked != user {
                return Err(format!("user {user:?} asked to act as {asked:?}"));
            }
        }
        let Some(found) = credential(&user) else {
            return Err(format!(
                "unknown user {user:?} for {} (no such credential)",
                mechanism.name()
            ));
        };
        let nonce = format!("{client_nonce}{}", nonce());
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&found.salt),
            found.iterations
        );
        let exchange = ServerExchange {
            mechanism,
            gs2_header: format!("{flag},{authzid},"),
            user,
            nonce,
            client_nonce_len: client_nonce.len(),
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            keys: found.keys,
        };
        Ok((exchange, server_first.into_bytes()))
    }

    /// The user the exchange authenticates.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Checks the client's final message and answers with the server's
    /// final one; else why the authentication fails (for the log).
    pub fn finish(self, client_final: &[u8]) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| "the client's final message is not UTF-8".to_string())?;
        let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
            return Err("the client-final message has no proof".to_string());
        };
        let mut attributes = without_proof.split(',');
        let binding = attributes.next().and_then(|p| attribute(p, 'c'));
        if binding.and_then(|b| STANDARD.decode(b).ok()).as_deref()
            != Some(self.gs2_header.as_bytes())
        {
            return Err("the client-final message's channel binding differs".to_string());
        }
        let nonce = attributes.next().and_then(|p| attribute(p, 'r'));
        // librdkafka before 2.6.1 sends its own nonce again in front of
        // the server's (which starts with it); Kafka 3.8.1 to 3.9 take
        // that form too. It still carries the whole server nonce.
        let old_librdkafka = nonce
            .and_then(|n| n.strip_prefix(&self.nonce[..self.client_nonce_len]))
            == Some(self.nonce.as_str());
        if nonce != Some(self.nonce.as_str()) && !old_librdkafka {
            return Err("the client-final message's nonce differs".to_string());
        }
        let proof = STANDARD
            .decode(proof)
            .map_err(|_| "the client's proof is not base64".to_string())?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let mechanism = self.mechanism;
        let signature = mechanism.mac(&self.keys.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err("the client's proof has the wrong length".to_string());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&mechanism.hash(&client_key), &self.keys.stored_key) {
            return Err(format!("wrong password for user {:?}", self.user));
        }
        let server_signature = mechanism.mac(&self.keys.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)).into_bytes())
    }
}

/// The client's side of one exchange.
pub struct ClientExchange {
    mechanism: Mechanism,
    password: Vec<u8>,
    client_first_bare: String,
    client_nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl ClientExchange {
    /// Starts an exchange for `user`: the client's first message.
    pub fn start(mechanism: Mechanism, user: &str, password: &str) -> (ClientExchange, Vec<u8>) {
        Self::with_nonce(mechanism, user, password, nonce())
    }

    fn with_nonce(
        mechanism: Mechanism,
        user: &str,
        password: &str,
        client_nonce: String,
    ) -> (ClientExchange, Vec<u8>) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_name(user));
        let first = format!("n,,{client_first_bare}").into_bytes();
        let exchange = ClientExchange {
            mechanism,
            password: password.as_bytes().to_vec(),
            client_first_bare,
            client_nonce,
            server_signature: None,
        };
        (exchange, first)
    }

    /// Answers the server's first message with the client's final one.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| "the server's first message is not UTF-8".to_string())?;
        let mut attributes = text.split(',');
        let nonce = attributes.next().and_then(|p| attribute(p, 'r'));
        let salt = attributes.next().and_then(|p| attribute(p, 's'));
        let iterations = attributes.next().and_then(|p| attribute(p, 'i'));
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("a malformed server-first message {text:?}"));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server's nonce does not extend the client's".to_string());
        }
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| "the server's salt is not base64".to_string())?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| format!("the iteration count {iterations:?} is not a number"))?;
        if iterations < ITERATIONS_MIN as u32 {
            return Err(format!(
                "the server asks for {iterations} iterations, fewer than {ITERATIONS_MIN}"
            ));
        }
        let mechanism = self.mechanism;
        let salted = mechanism.salted_password(&self.password, &salt, iterations);
        let keys = mechanism.keys(&salted);
        let without_proof = format!("c={},r={nonce}", STANDARD.encode("n,,"));
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_key = mechanism.mac(&salted, b"Client Key");
        let signature = mechanism.mac(&keys.stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        self.server_signature = Some(mechanism.mac(&keys.server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Checks the server's final message: the server knows the user's keys.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "the server's final message is not UTF-8".to_string())?;
        if let Some(error) = attribute(text, 'e') {
            return Err(format!("the server refused: {error}"));
        }
        let signature = attribute(text, 'v')
            .and_then(|v| STANDARD.decode(v).ok())
            .ok_or_else(|| format!("a malformed server-final message {text:?}"))?;
        match &self.server_signature {
            Some(expected) if constant_time_eq(expected, &signature) => Ok(()),
            Some(_) => {
                Err("the server's signature is wrong: it does not know the user's keys".to_string())
            }
            None => Err("the server's final message came before its first".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(mechanism: Mechanism, password: &str) -> Credential {
        let salt = b"a salt of sixteen".to_vec();
        let salted = mechanism.salted_password(password.as_bytes(), &salt, 4096);
        Credential {
            salt,
            iterations: 4096,
            keys: mechanism.keys(&salted),
        }
    }

    /// RFC 7677's SCRAM-SHA-256 example: user "user", password "pencil".
    #[test]
    fn the_rfc_7677_example_exchange_is_reproduced() {
        let mechanism = Mechanism::Sha256;
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = mechanism.salted_password(b"pencil", &salt, 4096);
        let (mut client, first) = ClientExchange::with_nonce(
            mechanism,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".to_string(),
        );
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = client.respond(server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        client
            .verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(client
            .verify(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .is_err());
        // The server's keys for it.
        let keys = mechanism.keys(&salted);
        assert_eq!(keys.stored_key.len(), 32);
    }

    #[test]
    fn client_and_server_agree_for_both_mechanisms() {
        for mechanism in Mechanism::ALL {
            let stored = credential(mechanism, "s3cret,=é");
            let (mut client, first) = ClientExchange::start(mechanism, "al,i=ce", "s3cret,=é");
            let (server, server_first) = ServerExchange::start(mechanism, &first, |user| {
                assert_eq!(user, "al,i=ce");
                Some(stored.clone())
            })
            .unwrap();
            assert_eq!(server.user(), "al,i=ce");
            let client_final = client.respond(&server_first).unwrap();
            let server_final = server.finish(&client_final).unwrap();
            client.verify(&server_final).unwrap();
        }
    }

    #[test]
    fn a_wrong_password_an_unknown_user_and_a_replayed_nonce_fail() {
        let mechanism = Mechanism::Sha512;
        let stored = credential(mechanism, "right");
        let (mut client, first) = ClientExchange::start(mechanism, "alice", "wrong");
        let (server, server_first) =
            ServerExchange::start(mechanism, &first, |_| Some(stored.clone())).unwrap();
        let client_final = client.respond(&server_first).unwrap();
        let error = server.finish(&client_final).unwrap_err();
        assert!(error.contains("wrong password"), "{error}");

        let (_, first) = ClientExchange::start(mechanism, "bob", "x");
        let error = ServerExchange::start(mechanism, &first, |_| None)
            .err()
            .unwrap();
        assert!(error.contains("unknown user"), "{error}");

        // A final message made for another exchange (its nonce) fails.
        let (mut client, first) = ClientExchange::start(mechanism, "alice", "right");
        let (_, server_first) =
            ServerExchange::start(mechanism, &first, |_| Some(stored.clone())).unwrap();
        let stale_final = client.respond(&server_first).unwrap();
        let (server, _) =
            ServerExchange::start(mechanism, &first, |_| Some(stored.clone())).unwrap();
        let error = server.finish(&stale_final).unwrap_err();
        assert!(error.contains("nonce"), "{error}");
    }

    /// librdkafka before 2.6.1 repeats its nonce in front of the
    /// server's; that form authenticates, another prefix does not.
    #[test]
    fn the_nonce_form_of_older_librdkafka_is_taken() {
        let mechanism = Mechanism::Sha256;
        let stored = credential(mechanism, "pw");
        for (prefix, taken) in [("cnonce", true), ("other", false)] {
            let (server, server_first) =
                ServerExchange::start(mechanism, b"n,,n=alice,r=cnonce", |_| Some(stored.clone()))
                    .unwrap();
            let server_first = String::from_utf8(server_first).unwrap();
            let nonce = attribute(server_first.split(',').next().unwrap(), 'r').unwrap();
            let without_proof = format!("c=biws,r={prefix}{nonce}");
            let auth_message = format!("n=alice,r=cnonce,{server_first},{without_proof}");
            let salted = mechanism.salted_password(b"pw", &stored.salt, 4096);
            let client_key = mechanism.mac(&salted, b"Client Key");
            let signature = mechanism.mac(&stored.keys.stored_key, auth_message.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(k, s)| k ^ s)
                .collect();
            let client_final = format!("{without_proof},p={}", STANDARD.encode(proof));
            assert_eq!(
                server.finish(client_final.as_bytes()).is_ok(),
                taken,
                "{prefix}"
            );
        }
    }

    #[test]
    fn malformed_messages_are_refused_with_a_reason() {
        let mechanism = Mechanism::Sha256;
        let found = |_: &str| Some(credential(mechanism, "p"));
        for (message, why) in [
            (&b"\xff"[..], "UTF-8"),
            (b"n,,", "no user"),
            (b"n,,n=alice", "no nonce"),
            (b"n,,n=alice,r=", "empty"),
            (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
            (b"x,,n=alice,r=abc", "flag"),
            (b"n,a=bob,n=alice,r=abc", "act as"),
            (b"n,,n=al=41ice,r=abc", "escape"),
            (b"n,,n=alice,r=abc,tokenauth=true", "delegation"),
            (b"n,,n=alice,r=abc,m=x", "mandatory"),
        ] {
            let error = ServerExchange::start(mechanism, message, found)
                .err()
                .unwrap();
            assert!(error.contains(why), "{message:?}: {error}");
        }
        let (server, _) = ServerExchange::start(mechanism, b"n,,n=alice,r=abc", found).unwrap();
        assert!(server
            .finish(b"c=biws,r=abc")
            .unwrap_err()
            .contains("no proof"));
        let (server, _) = ServerExchange::start(mechanism, b"n,,n=alice,r=abc", found).unwrap();
        assert!(server
            .finish(b"c=eSws,r=abc,p=AAAA")
            .unwrap_err()
            .contains("channel binding"));
    }

    #[test]
    fn mechanisms_map_to_kafkas_names_and_type_ids() {
        assert_eq!(
            Mechanism::from_name("scram-sha-512"),
            Some(Mechanism::Sha512)
        );
        assert_eq!(Mechanism::from_type_id(1), Some(Mechanism::Sha256));
        assert_eq!(Mechanism::from_type_id(0), None);
        assert_eq!(Mechanism::from_name("PLAIN"), None);
        assert_eq!(Mechanism::Sha512.type_id(), 2);
    }
}
