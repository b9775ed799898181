//! Kafka's KRaft settings (`process.roles`, `controller.quorum.voters`,
//! `controller.quorum.bootstrap.servers`, named `listeners` and
//! `advertised.listeners`, `controller.listener.names`): their syntax, and
//! the checks that need several of them at once. The values are parsed here
//! without I/O; `config` resolves addresses and reports errors naming the
//! key. A single node without voters uses none of them beyond these checks.

/// Listener names configured for the quorum when
/// `controller.listener.names` is not set.
pub const CONTROLLER_LISTENER_NAMES_DEFAULT: &str = "CONTROLLER";
/// `process.roles` when not set: one node that is both.
pub const PROCESS_ROLES_DEFAULT: &str = "broker,controller";
/// The name a bare `HOST:PORT` listener gets.
pub const CLIENT_LISTENER_NAME_DEFAULT: &str = "PLAINTEXT";

/// What a node does (`process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    pub broker: bool,
    pub controller: bool,
}

impl ProcessRoles {
    /// Parses `broker`, `controller` or both, comma separated. Only roles a
    /// Strom node can play are accepted: a controller alone is refused.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut roles = ProcessRoles {
            broker: false,
            controller: false,
        };
        for role in value.split(',').map(str::trim) {
            let seen = match role {
                "broker" => std::mem::replace(&mut roles.broker, true),
                "controller" => std::mem::replace(&mut roles.controller, true),
                "" => return Err("expected broker, controller or broker,controller".to_string()),
                other => {
                    return Err(format!(
                        "unknown role {other:?}: expected broker, controller or broker,controller"
                    ))
                }
            };
            if seen {
                return Err(format!("role {role:?} is given twice"));
            }
        }
        if roles.controller && !roles.broker {
            return Err(
                "a controller-only node is not supported yet: use broker,controller".to_string(),
            );
        }
        Ok(roles)
    }

    pub fn render(self) -> String {
        match (self.broker, self.controller) {
            (true, true) => "broker,controller",
            (true, false) => "broker",
            (false, true) => "controller",
            (false, false) => "",
        }
        .to_string()
    }
}

/// One voter of `controller.quorum.voters`: `ID@HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// A `HOST:PORT` with the host unbracketed (IPv6 may be written `[::1]:9093`).
pub fn parse_host_port(entry: &str) -> Result<(String, u16), String> {
    let Some((host, port)) = entry.rsplit_once(':') else {
        return Err(format!("{entry:?}: expected HOST:PORT"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{entry:?}: port {port:?} is not a number from 0 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{entry:?}: expected HOST:PORT with a host"));
    }
    Ok((host.to_string(), port))
}

/// Comma-separated entries, each trimmed; an empty list has none.
fn entries(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// Parses `controller.quorum.voters`: `ID@HOST:PORT,...`. A malformed
/// entry, an id given twice or an address given twice is refused, naming
/// the entry.
pub fn parse_voters(value: &str) -> Result<Vec<Voter>, String> {
    let mut voters: Vec<Voter> = Vec::new();
    for entry in entries(value) {
        let Some((id, address)) = entry.split_once('@') else {
            return Err(format!("{entry:?}: expected ID@HOST:PORT"));
        };
        let id: i32 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| format!("{entry:?}: the id {id:?} is not a node id (0 or more)"))?;
        let (host, port) = parse_host_port(address.trim())
            .map_err(|reason| format!("{entry:?}: expected ID@HOST:PORT ({reason})"))?;
        if voters.iter().any(|v| v.id == id) {
            return Err(format!("{entry:?}: voter {id} is given twice"));
        }
        if voters.iter().any(|v| v.host == host && v.port == port) {
            return Err(format!(
                "{entry:?}: the address {host}:{port} is given to two voters"
            ));
        }
        voters.push(Voter { id, host, port });
    }
    Ok(voters)
}

/// Parses `controller.quorum.bootstrap.servers`: `HOST:PORT,...`.
pub fn parse_bootstrap_servers(value: &str) -> Result<Vec<(String, u16)>, String> {
    let mut servers: Vec<(String, u16)> = Vec::new();
    for entry in entries(value) {
        let server = parse_host_port(entry)?;
        if servers.contains(&server) {
            return Err(format!("{entry:?} is given twice"));
        }
        servers.push(server);
    }
    Ok(servers)
}

/// One entry of `listeners` or `advertised.listeners`: `NAME://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedAddress {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl NamedAddress {
    pub fn render(&self) -> String {
        if self.host.contains(':') {
            format!("{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            format!("{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// A `listeners` or `advertised.listeners` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerList {
    /// A bare `HOST:PORT` (or `PLAINTEXT://HOST:PORT` alone): the client
    /// listener, as before listeners had names.
    Client(String, u16),
    /// `NAME://HOST:PORT,...`, names unique.
    Named(Vec<NamedAddress>),
}

/// Parses a listener list. Names are Kafka's: letters, digits and `_`,
/// case-insensitive (kept upper case), each once.
pub fn parse_listeners(value: &str) -> Result<ListenerList, String> {
    let value = value.trim();
    if !value.contains("://") {
        let (host, port) = parse_host_port(value)?;
        return Ok(ListenerList::Client(host, port));
    }
    let mut named: Vec<NamedAddress> = Vec::new();
    for entry in entries(value) {
        let Some((name, address)) = entry.split_once("://") else {
            return Err(format!("{entry:?}: expected NAME://HOST:PORT"));
        };
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{entry:?}: a listener name is letters, digits and _"
            ));
        }
        let (host, port) = parse_host_port(address.trim())
            .map_err(|reason| format!("{entry:?}: expected NAME://HOST:PORT ({reason})"))?;
        if named.iter().any(|l| l.name == name) {
            return Err(format!(
                "{entry:?}: the listener name {name} is given twice"
            ));
        }
        named.push(NamedAddress { name, host, port });
    }
    if named.is_empty() {
        return Err("expected NAME://HOST:PORT,...".to_string());
    }
    Ok(ListenerList::Named(named))
}

/// Parses `controller.listener.names`: `NAME,...`, upper-cased.
pub fn parse_listener_names(value: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    for entry in entries(value) {
        let name = entry.to_ascii_uppercase();
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{entry:?}: a listener name is letters, digits and _"
            ));
        }
        if names.contains(&name) {
            return Err(format!("{entry:?} is given twice"));
        }
        names.push(name);
    }
    if names.is_empty() {
        return Err("expected at least one listener name".to_string());
    }
    Ok(names)
}

/// The KRaft settings after the checks that involve several of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    pub roles: ProcessRoles,
    pub voters: Vec<Voter>,
    pub bootstrap_servers: Vec<(String, u16)>,
    /// Every listener, the client one first among the non-controller ones.
    pub listeners: Vec<NamedAddress>,
    pub controller_listener_names: Vec<String>,
    /// Advertised addresses by listener name (those not given advertise
    /// their listener's address).
    pub advertised_listeners: Vec<NamedAddress>,
    pub rack: Option<String>,
}

/// A check on several settings failed: the key to name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumError {
    pub key: &'static str,
    pub reason: String,
}

fn refuse(key: &'static str, reason: impl Into<String>) -> QuorumError {
    QuorumError {
        key,
        reason: reason.into(),
    }
}

impl Quorum {
    pub fn is_controller_listener(&self, name: &str) -> bool {
        self.controller_listener_names.iter().any(|n| n == name)
    }

    /// The listener clients connect to first: the first non-controller one.
    pub fn client_listener(&self) -> &NamedAddress {
        self.client_listeners()
            .next()
            .expect("checked: a client listener exists")
    }

    /// Every listener that is not a controller listener, in order.
    pub fn client_listeners(&self) -> impl Iterator<Item = &NamedAddress> {
        self.listeners
            .iter()
            .filter(|l| !self.is_controller_listener(&l.name))
    }

    /// The checks Kafka makes at start, for the roles Strom plays.
    pub fn check(&self, node_id: i32) -> Result<(), QuorumError> {
        let clients: Vec<&NamedAddress> = self
            .listeners
            .iter()
            .filter(|l| !self.is_controller_listener(&l.name))
            .collect();
        if clients.is_empty() {
            return Err(refuse(
                "listeners",
                "no client listener: every listener is named in controller.listener.names",
            ));
        }
        for (i, a) in self.listeners.iter().enumerate() {
            for b in &self.listeners[i + 1..] {
                if a.port != 0 && a.port == b.port && a.host == b.host {
                    return Err(refuse(
                        "listeners",
                        format!(
                            "{} and {} are both on {}:{}",
                            a.name, b.name, a.host, a.port
                        ),
                    ));
                }
            }
        }
        for advertised in &self.advertised_listeners {
            if !self.listeners.iter().any(|l| l.name == advertised.name) {
                return Err(refuse(
                    "advertised.listeners",
                    format!("{} is not a listener in listeners", advertised.name),
                ));
            }
        }
        if self.roles.controller && !self.voters.is_empty() {
            if !self.voters.iter().any(|v| v.id == node_id) {
                return Err(refuse(
                    "controller.quorum.voters",
                    format!(
                        "this node's node.id {node_id} is not one of the voters, \
                         yet process.roles includes controller"
                    ),
                ));
            }
            let controller_listener = self
                .listeners
                .iter()
                .any(|l| self.is_controller_listener(&l.name));
            if self.voters.len() > 1 && !controller_listener {
                return Err(refuse(
                    "listeners",
                    format!(
                        "this node is one of {} voters but has no controller listener \
                         (one named in controller.listener.names: {})",
                        self.voters.len(),
                        self.controller_listener_names.join(",")
                    ),
                ));
            }
        }
        if !self.roles.controller && self.voters.is_empty() && self.bootstrap_servers.is_empty() {
            return Err(refuse(
                "process.roles",
                "a broker-only node needs controller.quorum.voters or \
                 controller.quorum.bootstrap.servers to find its controllers",
            ));
        }
        Ok(())
    }
}

pub fn render_voters(voters: &[Voter]) -> String {
    voters
        .iter()
        .map(|v| {
            if v.host.contains(':') {
                format!("{}@[{}]:{}", v.id, v.host, v.port)
            } else {
                format!("{}@{}:{}", v.id, v.host, v.port)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub fn render_servers(servers: &[(String, u16)]) -> String {
    servers
        .iter()
        .map(|(host, port)| format!("{host}:{port}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn render_named(list: &[NamedAddress]) -> String {
    list.iter()
        .map(NamedAddress::render)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voter(id: i32, host: &str, port: u16) -> Voter {
        Voter {
            id,
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn voters_parse_into_id_host_port() {
        assert_eq!(
            parse_voters("1@127.0.0.1:9093, 2@127.0.0.1:19093,3@[::1]:29093").unwrap(),
            vec![
                voter(1, "127.0.0.1", 9093),
                voter(2, "127.0.0.1", 19093),
                voter(3, "::1", 29093)
            ]
        );
        assert_eq!(parse_voters("").unwrap(), vec![]);
    }

    #[test]
    fn bad_voters_are_refused_naming_the_entry() {
        let check = |value: &str, entry: &str, says: &str| {
            let error = parse_voters(value).unwrap_err();
            assert!(
                error.contains(entry) && error.contains(says),
                "{value}: {error}"
            );
        };
        check("1@a:1,1@b:2", "\"1@b:2\"", "given twice");
        check("1@a:1,2@a:1", "\"2@a:1\"", "two voters");
        check("1@a:1,b:2", "\"b:2\"", "ID@HOST:PORT");
        check("x@a:1", "\"x@a:1\"", "not a node id");
        check("-1@a:1", "\"-1@a:1\"", "not a node id");
        check("1@a", "\"1@a\"", "HOST:PORT");
        check("1@a:99999", "\"1@a:99999\"", "port");
        check("1@:9", "\"1@:9\"", "with a host");
    }

    #[test]
    fn roles() {
        let both = ProcessRoles::parse("broker,controller").unwrap();
        assert!(both.broker && both.controller);
        assert_eq!(ProcessRoles::parse(" controller , broker").unwrap(), both);
        assert!(!ProcessRoles::parse("broker").unwrap().controller);
        assert!(ProcessRoles::parse("controller")
            .unwrap_err()
            .contains("not supported yet"));
        assert!(ProcessRoles::parse("broker,broker")
            .unwrap_err()
            .contains("twice"));
        assert!(ProcessRoles::parse("leader")
            .unwrap_err()
            .contains("leader"));
        assert!(ProcessRoles::parse("").is_err());
    }

    #[test]
    fn listeners_bare_or_named() {
        assert_eq!(
            parse_listeners("127.0.0.1:9092").unwrap(),
            ListenerList::Client("127.0.0.1".to_string(), 9092)
        );
        let ListenerList::Named(named) =
            parse_listeners("PLAINTEXT://127.0.0.1:9092,controller://127.0.0.1:9093").unwrap()
        else {
            panic!("named")
        };
        assert_eq!(named[1].name, "CONTROLLER");
        assert_eq!(named[1].port, 9093);
        assert!(parse_listeners("A://h:1,A://h:2")
            .unwrap_err()
            .contains("given twice"));
        assert!(parse_listeners("A://h:1,h:2")
            .unwrap_err()
            .contains("NAME://HOST:PORT"));
        assert!(parse_listeners("A-B://h:1")
            .unwrap_err()
            .contains("letters"));
    }

    fn quorum(voters: &str, listeners: &str) -> Quorum {
        let ListenerList::Named(listeners) = parse_listeners(listeners).unwrap() else {
            panic!("named")
        };
        Quorum {
            roles: ProcessRoles::parse(PROCESS_ROLES_DEFAULT).unwrap(),
            voters: parse_voters(voters).unwrap(),
            bootstrap_servers: Vec::new(),
            listeners,
            controller_listener_names: vec!["CONTROLLER".to_string()],
            advertised_listeners: Vec::new(),
            rack: None,
        }
    }

    #[test]
    fn quorum_checks() {
        let three = "1@127.0.0.1:9093,2@127.0.0.1:19093,3@127.0.0.1:29093";
        let both = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093";
        let q = quorum(three, both);
        assert_eq!(q.check(1), Ok(()));
        assert_eq!(q.client_listener().port, 9092);
        let error = q.check(4).unwrap_err();
        assert_eq!(error.key, "controller.quorum.voters");
        assert!(error.reason.contains("node.id 4"), "{}", error.reason);
        let error = quorum(three, "PLAINTEXT://127.0.0.1:9092")
            .check(1)
            .unwrap_err();
        assert_eq!(error.key, "listeners");
        assert!(error.reason.contains("controller listener"));
        // One voter: itself, no controller listener needed.
        assert_eq!(
            quorum("1@127.0.0.1:9093", "PLAINTEXT://127.0.0.1:9092").check(1),
            Ok(())
        );
        let error = quorum("", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9092")
            .check(0)
            .unwrap_err();
        assert!(error.reason.contains("both on 127.0.0.1:9092"), "{error:?}");
        let error = quorum("", "CONTROLLER://127.0.0.1:9093")
            .check(0)
            .unwrap_err();
        assert!(error.reason.contains("no client listener"));
        // Several client listeners are served at once.
        let several = quorum("", "A://127.0.0.1:1,B://127.0.0.1:2");
        assert_eq!(several.check(0), Ok(()));
        let names: Vec<&str> = several
            .client_listeners()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(names, ["A", "B"]);
        let mut broker_only = quorum("", "PLAINTEXT://127.0.0.1:9092");
        broker_only.roles = ProcessRoles::parse("broker").unwrap();
        assert_eq!(broker_only.check(0).unwrap_err().key, "process.roles");
        broker_only.bootstrap_servers = vec![("127.0.0.1".to_string(), 9093)];
        assert_eq!(broker_only.check(0), Ok(()));
        let mut advertised = quorum("", "PLAINTEXT://127.0.0.1:9092");
        advertised.advertised_listeners = vec![NamedAddress {
            name: "OTHER".to_string(),
            host: "h".to_string(),
            port: 1,
        }];
        assert_eq!(advertised.check(0).unwrap_err().key, "advertised.listeners");
    }
}
