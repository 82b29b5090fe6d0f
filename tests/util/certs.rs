//! Certificates made at test time by the openssl CLI: a CA, a server
//! certificate for 127.0.0.1 and a client certificate signed by it, and a
//! second CA that signed none of them (for "wrong CA" cases).

use std::path::Path;
use std::process::Command;

/// In `dir`: `ca.crt`, `server.crt`/`server.key` (127.0.0.1), `client.crt`/`client.key`, and `other-ca.crt`.
pub fn certificates(dir: &Path) {
    let sh = r#"set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile san.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=client 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 -extfile client.ext 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca 2>/dev/null
chmod 644 ./*.key
"#;
    let st = Command::new("sh").args(["-c", sh]).current_dir(dir).status().expect("run openssl");
    assert!(st.success(), "openssl could not make the test certificates");
}
