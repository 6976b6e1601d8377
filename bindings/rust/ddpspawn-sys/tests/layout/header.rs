//! The header side of `tests/layout.rs`: what `ddpspawn/ddpspawn.h` declares,
//! read from its text.

/// What the header declares, as far as the C program needs to know.
#[derive(Default, Debug)]
pub(crate) struct Header {
    /// Structs with a body: typedef name and field names in order.
    pub(crate) structs: Vec<(String, Vec<String>)>,
    /// Structs declared without a body (opaque handles).
    pub(crate) opaque: Vec<String>,
    /// Other typedefs (scalars, function pointers).
    pub(crate) typedefs: Vec<String>,
    /// Object-like macros with an integer value.
    pub(crate) defines: Vec<String>,
    /// Object-like macros with a braced initializer (`*_INIT`).
    pub(crate) init_macros: Vec<String>,
    /// Exported functions (`DDPSPAWN_EXPORT`), by name.
    pub(crate) functions: Vec<String>,
    /// What the parser could not handle: a failure, so that a new kind of
    /// declaration gets a check here rather than none.
    pub(crate) problems: Vec<String>,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |i| i + 2);
            // Keep line structure for the #define scan.
            out.extend(after[..end].chars().filter(|&c| c == '\n'));
            out.push(' ');
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = &after[after.find('\n').unwrap_or(after.len())..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The declared name in a declaration such as `const char* name`,
/// `int (*name)(void)` or `int name[4]`.
fn declared_name(decl: &str) -> Option<String> {
    let decl = decl.trim();
    let tail = match decl.find("(*") {
        Some(i) => {
            let after = decl[i + 2..].trim_start();
            let name: String = after.chars().take_while(|&c| is_ident_char(c)).collect();
            return (!name.is_empty()).then_some(name);
        }
        None => decl.split('[').next().unwrap_or("").trim_end(),
    };
    let start = tail.rfind(|c: char| !is_ident_char(c)).map_or(0, |i| i + 1);
    let name = &tail[start..];
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then(|| name.to_string())
}

pub(crate) fn parse_header(text: &str) -> Header {
    let mut header = Header::default();
    let text = strip_comments(text).replace("\\\n", " ");

    // Object-like macros.
    for line in text.lines() {
        // (No let-else: this crate's rust-version is 1.63.)
        let rest = match line.trim_start().strip_prefix('#') {
            Some(rest) => rest,
            None => continue,
        };
        let rest = match rest.trim_start().strip_prefix("define") {
            Some(rest) => rest,
            None => continue,
        };
        let rest = rest.trim_start();
        let name: String = rest.chars().take_while(|&c| is_ident_char(c)).collect();
        let after = &rest[name.len()..];
        let value = after.trim();
        if !name.starts_with("DDPSPAWN_") || value.is_empty() || name == "DDPSPAWN_EXPORT" {
            // Include guard, export attribute: nothing to mirror.
            continue;
        }
        if after.starts_with('(') {
            header.problems.push(format!(
                "function-like macro {name}: not checked by tests/layout.rs"
            ));
        } else if value.starts_with('{') {
            header.init_macros.push(name);
        } else if value.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '(') {
            header.defines.push(name);
        } else {
            header.problems.push(format!(
                "#define {name} {value}: not an integer or an initializer; teach tests/layout.rs to check it"
            ));
        }
    }

    // Typedefs: each `typedef ... ;` outside the preprocessor lines.
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut search = 0;
    while let Some(found) = code[search..].find("typedef") {
        let start = search + found;
        let boundary_before = code[..start]
            .chars()
            .next_back()
            .map_or(true, |c| !is_ident_char(c));
        let boundary_after = code[start + 7..]
            .chars()
            .next()
            .map_or(false, |c| !is_ident_char(c));
        search = start + 7;
        if !boundary_before || !boundary_after {
            continue;
        }
        // The statement ends at the first ';' outside braces.
        let mut depth = 0i32;
        let mut end = None;
        for (i, c) in code[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    end = Some(start + i);
                    break;
                }
                _ => {}
            }
        }
        let end = match end {
            Some(end) => end,
            None => {
                header.problems.push("unterminated typedef".to_string());
                break;
            }
        };
        let statement = code[start + 7..end].trim();
        search = end + 1;
        parse_typedef(statement, &mut header);
    }

    // Functions: `DDPSPAWN_EXPORT <return type> name(...)`.
    const EXPORT: &str = "DDPSPAWN_EXPORT";
    for (start, _) in code.match_indices(EXPORT) {
        let rest = &code[start + EXPORT.len()..];
        let name = match rest.find('(') {
            Some(open) => declared_name(&rest[..open]),
            None => None,
        };
        match name {
            Some(name) => header.functions.push(name),
            None => header.problems.push(format!(
                "cannot read the function after {EXPORT}: `{}`",
                rest.lines().next().unwrap_or("").trim()
            )),
        }
    }
    header
}

fn parse_typedef(statement: &str, header: &mut Header) {
    let rest = match statement.strip_prefix("struct") {
        Some(rest) => rest,
        None => {
            match declared_name(statement) {
                Some(name) => header.typedefs.push(name),
                None => header
                    .problems
                    .push(format!("cannot read typedef {statement}")),
            }
            return;
        }
    };
    match (rest.find('{'), rest.rfind('}')) {
        (Some(open), Some(close)) => {
            let name = rest[close + 1..].trim().to_string();
            let mut fields = Vec::new();
            for decl in rest[open + 1..close].split(';').map(str::trim) {
                if decl.is_empty() {
                    continue;
                }
                if decl.contains('{') || decl.contains(':') {
                    header.problems.push(format!(
                        "{name}: nested struct or bit-field `{decl}` not checked by tests/layout.rs"
                    ));
                    continue;
                }
                match declared_name(decl) {
                    Some(field) => fields.push(field),
                    None => header
                        .problems
                        .push(format!("{name}: cannot read field `{decl}`")),
                }
            }
            header.structs.push((name, fields));
        }
        _ => match declared_name(rest) {
            Some(name) => header.opaque.push(name),
            None => header
                .problems
                .push(format!("cannot read typedef struct{rest}")),
        },
    }
}

/// `DDPSPAWN_LAUNCH_OPTIONS_INIT` for `ddpspawn_launch_options`.
pub(crate) fn init_macro_for(struct_name: &str) -> String {
    let base = struct_name.strip_prefix("ddpspawn_").unwrap_or(struct_name);
    format!("DDPSPAWN_{}_INIT", base.to_ascii_uppercase())
}
