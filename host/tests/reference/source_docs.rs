//! The doc comments of a struct's fields or an enum's variants, read from the source: what the user's
//! reference says about each is what the code's author wrote beside it, not a second copy.

/// One documented item; with `Group::Shared`, fields without a doc comment of their own share the one
/// above them (`plugin_max_deadline_ms` and `plugin_max_memory_bytes`), as `Config` groups them.
pub struct Documented {
    pub names: Vec<String>,
    pub doc: String,
}

/// Whether an item without a doc comment shares the one above it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Shared,
    Apart,
}

/// The items of the block opened by the line containing `opening` in `source` (up to the `}` at its
/// indentation); `name_of` picks an item's name from its line (`None`: not an item, e.g. an attribute).
pub fn items(source: &str, opening: &str, group: Group, name_of: impl Fn(&str) -> Option<String>) -> Vec<Documented> {
    let mut lines = source.lines().skip_while(|line| !line.contains(opening));
    let first = lines.next().unwrap_or_else(|| panic!("{opening} in the source"));
    let closing = format!("{}}}", &first[..first.len() - first.trim_start().len()]);
    let (mut documented, mut doc) = (Vec::<Documented>::new(), Vec::<&str>::new());
    let mut renamed = None;
    for line in lines.take_while(|line| !line.starts_with(&closing)) {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
            continue;
        }
        if let Some(rename) = line.strip_prefix("#[serde(rename = \"") {
            renamed = rename.split('"').next().map(str::to_owned);
            continue;
        }
        let Some(name) = name_of(line) else { continue };
        // What the user sees is the serialised name.
        let name = renamed.take().unwrap_or(name);
        match documented.last_mut() {
            Some(last) if doc.is_empty() && group == Group::Shared => last.names.push(name),
            _ => documented.push(Documented { names: vec![name], doc: doc.join(" ") }),
        }
        doc.clear();
    }
    documented
}

/// `pub name: Type,` → `name`.
pub fn field(line: &str) -> Option<String> {
    let (name, _) = line.strip_prefix("pub ")?.split_once(':')?;
    Some(name.trim().to_owned())
}

/// `Name = "spelling",` (a `str_enum!` variant) → `spelling`.
pub fn spelled_variant(line: &str) -> Option<String> {
    let (_, spelling) = line.split_once(" = \"")?;
    Some(spelling.split('"').next()?.to_owned())
}

/// A doc comment as one table cell (rustdoc's links as plain code).
pub fn cell(doc: &str) -> String {
    doc.replace("[`", "`").replace("`]", "`").replace('|', "\\|")
}
