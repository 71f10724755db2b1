//! `docs/reference/configuration.md`: every key of `Config`, its section form, its environment variable,
//! its default (the serialised `Config::default()`) and its field's doc comment.

use strand::config::{Config, SECTIONS};

use crate::source_docs::{cell, field, items, Group};
use crate::{check, repository, GENERATED};

/// How a flat key is written in its file section, if it has one: `kafka_brokers` → `[kafka] brokers`.
fn sectioned(key: &str) -> Option<String> {
    if key == "relay" {
        return Some("`[relay] mode`".to_owned());
    }
    let (section, name) = key.split_once('_')?;
    SECTIONS.contains(&section).then(|| format!("`[{section}] {name}`"))
}

#[test]
fn the_configuration_reference_is_every_key_of_config_with_its_default() {
    let source = std::fs::read_to_string(repository().join("host/src/config/mod.rs")).unwrap();
    let documented = items(&source, "pub struct Config {", Group::Shared, field);
    let defaults = toml::Value::try_from(Config::default()).unwrap();
    let mut page = format!("# Configuration\n\n{GENERATED}");
    page.push_str(
        "Every key is optional. Set it in `config.toml` (the file `STRAND_CONFIG` names; `./config.toml` by \
         default) flat (`kafka_brokers = \"…\"`) or in its section (`[kafka]` then `brokers = \"…\"`), or in the \
         environment as `STRAND_` and the key in capitals, which wins over the file. With nothing set, Strand \
         runs on the embedded default.\n\n| key | in its section | environment | default | what it does |\n\
         |---|---|---|---|---|\n",
    );
    let mut keys = 0;
    for item in &documented {
        assert!(!item.doc.is_empty(), "Config's field {} has no doc comment", item.names[0]);
        for (index, key) in item.names.iter().enumerate() {
            let default = match defaults.get(key) {
                Some(toml::Value::Table(table)) if table.is_empty() => "—".to_owned(),
                Some(value) => format!("`{value}`"),
                None => "unset".to_owned(),
            };
            let doc = if index == 0 { cell(&item.doc) } else { format!("(with `{}`)", item.names[0]) };
            let section = sectioned(key).unwrap_or_else(|| "—".to_owned());
            page.push_str(&format!("| `{key}` | {section} | `STRAND_{}` | {default} | {doc} |\n", key.to_uppercase()));
            keys += 1;
        }
    }
    let serialised = defaults.as_table().unwrap().keys().filter(|key| !page.contains(&format!("| `{key}` |"))).count();
    assert_eq!(serialised, 0, "keys of Config::default() the source's parse missed");
    assert!(keys >= 50, "{keys} keys read from Config");
    check("configuration.md", &page);
}
