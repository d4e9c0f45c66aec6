//! `--token-auth-file`: static bearer tokens from a CSV file, upstream's format:
//! `token,user,uid,"group1,group2"` (the groups column is optional).

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use krate_api::user::UserInfo;

use super::bearer::implicit_audiences;
use super::{Authenticated, AuthnError, TokenAuthenticator};

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("token file '{path}' must have at least 3 columns (token, user name, user uid), found {found}")]
    Columns { path: String, found: usize },
    #[error("token file '{path}', line {line}: unterminated quoted field")]
    Quote { path: String, line: usize },
}

/// One CSV record: fields split on commas outside double quotes ("" is a quote).
fn fields(line: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut()?.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(String::new()),
            (c, _) => out.last_mut()?.push(c),
        }
    }
    // Leading spaces of fields are trimmed, as upstream's reader does.
    (!quoted).then(|| out.into_iter().map(|f| f.trim_start().to_string()).collect())
}

pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
    api_audiences: Vec<String>,
}

impl TokenFile {
    /// Parses the file's contents; `path` only names it in errors.
    pub fn parse(path: &str, contents: &str, api_audiences: Vec<String>) -> Result<TokenFile, TokenFileError> {
        let mut tokens = HashMap::new();
        let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
        for (i, line) in contents.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let record = fields(line).ok_or(TokenFileError::Quote { path: path.into(), line: i + 1 })?;
            if record.len() < 3 {
                return Err(TokenFileError::Columns { path: path.into(), found: record.len() });
            }
            if record[0].is_empty() {
                tracing::warn!(path, line = i + 1, "empty token in the token file; skipped");
                continue;
            }
            let groups = match record.get(3) {
                Some(g) if !g.is_empty() => g.split(',').map(|s| s.trim().to_string()).collect(),
                _ => vec![],
            };
            let user = UserInfo { name: record[1].clone(), uid: record[2].clone(), groups, ..Default::default() };
            if tokens.insert(record[0].clone(), user).is_some() {
                tracing::warn!(path, line = i + 1, "duplicate token in the token file; the last one wins");
            }
        }
        Ok(TokenFile { tokens, api_audiences })
    }

    pub async fn load(path: &Path, api_audiences: Vec<String>) -> Result<TokenFile, TokenFileError> {
        let name = path.display().to_string();
        let contents = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| TokenFileError::Io { path: name.clone(), source })?;
        Self::parse(&name, &contents, api_audiences)
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[async_trait]
impl TokenAuthenticator for TokenFile {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<Option<Authenticated>, AuthnError> {
        let Some(user) = self.tokens.get(token) else { return Ok(None) };
        let audiences = implicit_audiences(&self.api_audiences, audiences)?;
        Ok(Some(Authenticated { user: user.clone(), audiences }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_map_to_users_with_groups() {
        let csv = "\u{feff}tok1,alice,1,\"dev,ops\"\n# comment\n\ntok2,bob,2\ntok3, carol ,3,\"a\"\"b\"\n";
        let f = TokenFile::parse("t.csv", csv, vec!["api".into()]).unwrap();
        assert_eq!(f.len(), 3);
        let a = f.authenticate_token("tok1", &[]).await.unwrap().unwrap();
        assert_eq!((a.user.name.as_str(), a.user.uid.as_str()), ("alice", "1"));
        assert_eq!(a.user.groups, ["dev", "ops"]);
        assert_eq!(a.audiences, ["api"]);
        let b = f.authenticate_token("tok2", &[]).await.unwrap().unwrap();
        assert!(b.user.groups.is_empty());
        let c = f.authenticate_token("tok3", &[]).await.unwrap().unwrap();
        assert_eq!((c.user.name.as_str(), c.user.groups[0].as_str()), ("carol ", "a\"b"));
        assert!(f.authenticate_token("nope", &[]).await.unwrap().is_none());
        assert!(f.authenticate_token("tok1", &["other".into()]).await.is_err());
    }

    #[test]
    fn short_records_and_open_quotes_are_errors() {
        let e = TokenFile::parse("t.csv", "tok,alice\n", vec![]).err().unwrap();
        assert_eq!(
            e.to_string(),
            "token file 't.csv' must have at least 3 columns (token, user name, user uid), found 2"
        );
        assert!(TokenFile::parse("t.csv", "tok,alice,1,\"dev\n", vec![]).is_err());
    }
}
