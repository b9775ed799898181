//! Kafka's JAAS configuration lines (`sasl.jaas.config`): a login module,
//! the flag `required`, and quoted `key="value"` options, read for the
//! broker's PLAIN users and for a client's (or a broker's own) login.

pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// The options of a login module line, one of `modules`:
/// `org.apache.kafka.common.security.plain.PlainLoginModule required
/// key="value" ...;`.
pub fn jaas_options(jaas: &str, modules: &[&str]) -> Result<Vec<(String, String)>, String> {
    let jaas = jaas.trim();
    let Some(rest) = modules.iter().find_map(|m| jaas.strip_prefix(m)) else {
        return Err(format!("expected {} required ...;", modules.join(" or ")));
    };
    let rest = rest.trim_start();
    let Some(rest) = rest.strip_prefix("required") else {
        return Err("expected the flag `required` after the login module".to_string());
    };
    let Some(body) = rest.trim().strip_suffix(';') else {
        return Err("expected `;` at the end".to_string());
    };
    let mut options = Vec::new();
    let mut text = body.trim();
    while !text.is_empty() {
        let Some((key, after)) = text.split_once('=') else {
            return Err(format!("expected key=\"value\" at {text:?}"));
        };
        let key = key.trim();
        let after = after.trim_start();
        let Some(quoted) = after.strip_prefix('"') else {
            return Err(format!("the value of {key} is not quoted"));
        };
        let Some(end) = quoted.find('"') else {
            return Err(format!("the value of {key} has no closing quote"));
        };
        options.push((key.to_string(), quoted[..end].to_string()));
        text = quoted[end + 1..].trim_start();
    }
    Ok(options)
}

/// A client's JAAS config (`sasl.jaas.config` of Kafka's client
/// properties, PlainLoginModule or ScramLoginModule): its `username` and
/// `password`.
pub fn client_login(jaas: &str) -> Result<(String, String), String> {
    let options = jaas_options(jaas, &[PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE])?;
    let find = |key: &str| {
        options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("no {key}=\"...\""))
    };
    Ok((find("username")?, find("password")?))
}
