//! Every place where the two SQL dialects differ in a statement, as methods of [`DatabaseKind`]: callers
//! write their SQL once and ask here for the part that differs.

use super::DatabaseKind;

impl DatabaseKind {
    /// The clause that turns an `INSERT` into an upsert on the unique `key`; `SET` assignments follow.
    pub fn on_conflict_update(self, key: &[&str]) -> String {
        match self {
            DatabaseKind::MySql => " ON DUPLICATE KEY UPDATE ".to_owned(),
            DatabaseKind::Sqlite => format!(" ON CONFLICT ({}) DO UPDATE SET ", key.join(", ")),
        }
    }

    /// The value an upsert's `column` would have had: in its assignments, the existing row's columns are
    /// named plainly and the inserted row's through this.
    pub fn inserted(self, column: &str) -> String {
        match self {
            DatabaseKind::MySql => format!("VALUES({column})"),
            DatabaseKind::Sqlite => format!("excluded.{column}"),
        }
    }

    /// `INSERT INTO table (columns) VALUES (?, …)` that overwrites every column but the `key` of an
    /// existing row.
    pub fn upsert(self, table: &str, columns: &[&str], key: &[&str]) -> String {
        let values = vec!["?"; columns.len()].join(", ");
        let assignments: Vec<String> = columns
            .iter()
            .filter(|column| !key.contains(column))
            .map(|column| format!("{column} = {}", self.inserted(column)))
            .collect();
        format!(
            "INSERT INTO {table} ({}) VALUES ({values}){}{}",
            columns.join(", "),
            self.on_conflict_update(key),
            assignments.join(", ")
        )
    }

    /// An `INSERT INTO` that skips a row whose key exists instead of failing: the statement's start (the
    /// table and its columns follow) and its end (before a `RETURNING`, which then names the rows written).
    /// MySQL's `IGNORE` would also turn a bad value into a warning: the callers insert numbers they made.
    pub fn insert_new(self) -> (&'static str, &'static str) {
        match self {
            DatabaseKind::MySql => ("INSERT IGNORE INTO", ""),
            DatabaseKind::Sqlite => ("INSERT INTO", " ON CONFLICT DO NOTHING"),
        }
    }

    /// `table` read by its primary key only. MySQL's planner, given an `IN` list on a secondary index's
    /// column, may scan that index; the key is the bounded lookup.
    pub fn by_primary_key(self, table: &str) -> String {
        match self {
            DatabaseKind::MySql => format!("{table} FORCE INDEX (PRIMARY)"),
            DatabaseKind::Sqlite => table.to_owned(),
        }
    }

    /// `table` read through `index`. MySQL's planner may prefer the primary key's tenant prefix to a
    /// secondary index that bounds the read to one account — a walk over the tenant's every row, again for
    /// each batch of a job; SQLite's picks the bounded index by itself.
    pub fn by_index(self, table: &str, index: &str) -> String {
        match self {
            DatabaseKind::MySql => format!("{table} FORCE INDEX ({index})"),
            DatabaseKind::Sqlite => table.to_owned(),
        }
    }

    /// `column` in a condition that must not pick an index (SQLite's unary `+`; MySQL needs no hint once
    /// [`DatabaseKind::by_primary_key`] chose).
    pub fn not_an_index(self, column: &str) -> String {
        match self {
            DatabaseKind::MySql => column.to_owned(),
            DatabaseKind::Sqlite => format!("+{column}"),
        }
    }

    /// The clause that locks the rows a `SELECT` reads until commit: shared or exclusive. SQLite's one
    /// writer connection excludes every other writer, so it needs none.
    pub fn row_lock(self, shared: bool) -> &'static str {
        match (self, shared) {
            (DatabaseKind::MySql, true) => " LOCK IN SHARE MODE",
            (DatabaseKind::MySql, false) => " FOR UPDATE",
            (DatabaseKind::Sqlite, _) => "",
        }
    }

    /// One statement returning the rows of every `SELECT` of `parts`, each with its own lock clause (MySQL
    /// takes a clause per parenthesized part; SQLite allows no parentheses there, and has no clauses).
    pub fn union_all(self, parts: &[String]) -> String {
        match self {
            DatabaseKind::MySql => parts.iter().map(|p| format!("({p})")).collect::<Vec<_>>().join(" UNION ALL "),
            DatabaseKind::Sqlite => parts.join(" UNION ALL "),
        }
    }

    /// Whether concurrent writers queue on row locks (SQLite's one writer connection excludes the others).
    pub fn has_row_locks(self) -> bool {
        self == DatabaseKind::MySql
    }

    /// A text value written as a literal from its UTF-8 bytes in `hex` (nothing in it is parsed as SQL).
    pub fn text_literal(self, hex: &str) -> String {
        match self {
            DatabaseKind::MySql => format!("CONVERT(X'{hex}' USING utf8mb4)"),
            DatabaseKind::Sqlite => format!("CAST(X'{hex}' AS TEXT)"),
        }
    }

    /// A join of `first` to `then` evaluated in that order: `first` bounds the work (the planner left to
    /// itself may start from the side with millions of rows).
    pub fn join_in_order(self, first: &str, then: &str) -> String {
        match self {
            DatabaseKind::MySql => format!("{first} STRAIGHT_JOIN {then}"),
            DatabaseKind::Sqlite => format!("{first} CROSS JOIN {then}"),
        }
    }

    /// Whether processes can share a named lock on the server (`GET_LOCK`): how relays elect one leader.
    /// A SQLite file has one process, which leads.
    pub fn has_named_locks(self) -> bool {
        self == DatabaseKind::MySql
    }

    /// Whether the server keeps a binlog the relay can follow.
    pub fn has_binlog(self) -> bool {
        self == DatabaseKind::MySql
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upsert_overwrites_all_but_its_key() {
        let columns = ["projection", "tenant_id", "done"];
        assert_eq!(
            DatabaseKind::MySql.upsert("progress", &columns, &["projection", "tenant_id"]),
            "INSERT INTO progress (projection, tenant_id, done) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE done = VALUES(done)"
        );
        assert_eq!(
            DatabaseKind::Sqlite.upsert("progress", &columns, &["projection", "tenant_id"]),
            "INSERT INTO progress (projection, tenant_id, done) VALUES (?, ?, ?) \
             ON CONFLICT (projection, tenant_id) DO UPDATE SET done = excluded.done"
        );
    }
}
