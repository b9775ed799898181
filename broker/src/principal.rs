//! The principal of a TLS client certificate, as Kafka names it: the
//! certificate's subject as an RFC 2253 distinguished name
//! (`CN=alice,OU=eng,O=Example`, the most specific part first), mapped by
//! `ssl.principal.mapping.rules`: Kafka's list of `RULE:pattern/replacement/`
//! (with an optional `L` or `U` to lower or upper the result) and
//! `DEFAULT` (the name as is), the first rule whose pattern matches the
//! whole name deciding. The principal is then `User:<name>`.

use regex::Regex;
use x509_parser::prelude::{FromDer, X509Certificate};

/// One of `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: Regex,
        replacement: String,
        case: Option<char>,
    },
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl PrincipalMapper {
    /// Parses Kafka's rule list; else why not.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, String> {
        let mut parsed = Vec::new();
        let mut rest = rules.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                parsed.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("a RULE without its closing `/`s at {rest:?}"))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| format!("a RULE without its closing `/`s at {rest:?}"))?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let anchored = format!("^(?:{pattern})$");
                let pattern = Regex::new(&anchored)
                    .map_err(|error| format!("the pattern {pattern:?}: {error}"))?;
                parsed.push(Rule::Replace {
                    pattern,
                    replacement: java_groups(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "expected DEFAULT or RULE:pattern/replacement/[LU] at {rest:?}"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("expected `,` between rules at {rest:?}")),
            }
        }
        if parsed.is_empty() {
            return Err("no rule: give DEFAULT at least".to_string());
        }
        Ok(PrincipalMapper { rules: parsed })
    }

    /// The name `dn` maps to, or None when no rule applies.
    pub fn map(&self, dn: &str) -> Option<String> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Some(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if pattern.is_match(dn) {
                        let name = pattern.replace(dn, replacement.as_str()).into_owned();
                        return Some(match case {
                            Some('L') => name.to_lowercase(),
                            Some('U') => name.to_uppercase(),
                            _ => name,
                        });
                    }
                }
            }
        }
        None
    }
}

/// The text up to the next `/` not escaped by `\`, and what follows it.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                let (_, next) = chars.next()?;
                if next != '/' {
                    out.push('\\');
                }
                out.push(next);
            }
            '/' => return Some((out, &text[i + 1..])),
            _ => out.push(c),
        }
    }
    None
}

/// Java's `$1` group references as Rust's regex writes them (`${1}`), so
/// `$1@$2` and `$1x` mean what they mean in Kafka.
fn java_groups(replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push_str("${");
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                out.push(d);
                chars.next();
            }
            out.push('}');
        } else {
            out.push(c);
        }
    }
    out
}

/// The principal a TLS peer's certificates name: `User:` and the first
/// certificate's subject mapped by `mapper` (as is without one); `None`
/// without a certificate; else why the peer cannot be served.
pub fn of_certificates(
    mapper: Option<&PrincipalMapper>,
    certificates: Option<&[rustls::pki_types::CertificateDer<'_>]>,
) -> Result<Option<String>, String> {
    let Some(certificate) = certificates.and_then(|c| c.first()) else {
        return Ok(None);
    };
    let subject = subject_name(certificate)
        .ok_or_else(|| "the client certificate's subject does not parse".to_string())?;
    let name = match mapper {
        Some(mapper) => mapper.map(&subject).ok_or_else(|| {
            format!("no rule of ssl.principal.mapping.rules applies to {subject:?}")
        })?,
        None => subject,
    };
    Ok(Some(format!("User:{name}")))
}

/// A certificate's subject as an RFC 2253 name (Java's
/// `X500Principal.getName()`), or None when it does not parse.
pub fn subject_name(certificate_der: &[u8]) -> Option<String> {
    let (_, certificate) = X509Certificate::from_der(certificate_der).ok()?;
    let rdns: Vec<String> = certificate
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let oid = attribute.attr_type().to_id_string();
                    let key = short_name(&oid).unwrap_or(&oid);
                    let value = attribute.as_str().map(escape).unwrap_or_else(|_| {
                        // Not a string: Java writes `#` and the DER in hex.
                        let hex: String = attribute
                            .attr_value()
                            .data
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect();
                        format!("#{hex}")
                    });
                    format!("{key}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RFC 2253's keywords (those Java writes by name).
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// An attribute value with RFC 2253's special characters escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let edge = (i == 0 && (c == ' ' || c == '#')) || (i + 1 == value.len() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DN: &str = "CN=alice,OU=ServiceUsers,O=Example,L=Berlin,ST=BE,C=DE";

    #[test]
    fn kafkas_rule_lists_map_names_as_kafka_does() {
        let mapper = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U,DEFAULT",
        )
        .unwrap();
        assert_eq!(mapper.map(DN).as_deref(), Some("alice"));
        let other = "CN=bob,OU=Ops,O=Example,L=Berlin,ST=BE,C=DE";
        assert_eq!(mapper.map(other).as_deref(), Some("BOB@OPS"));
        assert_eq!(mapper.map("CN=x").as_deref(), Some("CN=x"));
        let lower = PrincipalMapper::parse("RULE:^CN=([^,]*).*$/$1/L").unwrap();
        assert_eq!(lower.map("CN=Alice,O=X").as_deref(), Some("alice"));
        assert_eq!(lower.map("O=X"), None, "no rule applies");
        let escaped = PrincipalMapper::parse(r"RULE:^CN=([^,]*)$/users\/$1/").unwrap();
        assert_eq!(escaped.map("CN=a").as_deref(), Some("users/a"));
        assert_eq!(
            PrincipalMapper::default().map(DN).as_deref(),
            Some(DN),
            "DEFAULT: the name as is"
        );
    }

    #[test]
    fn bad_rule_lists_say_why() {
        for bad in [
            "",
            "RULE:^CN=(.*)$",
            "RULE:^CN=(.*$/$1/",
            "SOMETHING",
            "DEFAULT DEFAULT",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn special_characters_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("a,b+c"), r"a\,b\+c");
        assert_eq!(escape(" lead"), r"\ lead");
        assert_eq!(escape("#x"), r"\#x");
        assert_eq!(java_groups("$1@$2x"), "${1}@${2}x");
    }
}
