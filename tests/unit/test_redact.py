"""Secret redaction: every secret shape is hidden, ordinary text is untouched, rewriting is idempotent."""

from __future__ import annotations

import copy
import random

import pytest

from sessions.core.redact import (
    REDACTED,
    bound_tail,
    bound_text,
    is_secret_key,
    redact_argv,
    redact_text,
    redact_value,
    register_secret,
)

OPENAI_KEY = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7"
ANTHROPIC_KEY = "sk-ant-api03-" + "x7Y2z9Q4w1E8r5T3u6I0o2P9a4S7d1F3"
GITHUB_TOKENS = [p + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8" for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")]
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
AWS_KEYS = ["AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A"]
GOOGLE_KEY = "AIza" + "SyA-1234567890abcdefghijklmnopqrstu"
SLACK_TOKEN = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
STRIPE_KEYS = ["sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "rk_live_" + "51H8x2eZvKYlo2C0aBcDeFgH"]

PROVIDER_TOKENS = [OPENAI_KEY, ANTHROPIC_KEY, *GITHUB_TOKENS, GITHUB_PAT, *AWS_KEYS, GOOGLE_KEY, SLACK_TOKEN]
PROVIDER_TOKENS += [JWT, *STRIPE_KEYS, "glpat-abcdefghij1234567890", "glrt-Zq8r4Xy7Lm2Nk9Pw3Vb6Tc"]

ORDINARY = [
    # prose, including words near the trigger list ("author", "tokens", "key", "session")
    "The agent finished refactoring the session store. Its author reviewed the diff, noted that the key "
    "insight was batching writes, and asked for a follow-up on token counting before the release.",
    # code, including type-annotated secret-named parameters and comparisons
    "def login(password: str, token: Optional[str] = None) -> bool:\n"
    "    if token == expected:\n"
    '        return check(password, path="/etc/compozy/config.toml")\n'
    "    return False\n",
    "/home/dev/project/src/sessions/store/events.py:123: in append",
    "/etc/passwd: permission denied",
    "commit 3f2a9c1b7e4d5f6a8b9c0d1e2f3a4b5c6d7e8f90 fixed the flaky test (see 3f2a9c1)",
    "Author: Jane Doe <jane@example.com>",
    "session 123e4567-e89b-12d3-a456-426614174000 resumed after 3 turns",
    "clone ssh://git@github.com/compozy/compozy.git or https://github.com/compozy/compozy",
    "uses Bearer authentication. The bearer of this note may pass.",
    '{"type": "usage", "max_tokens": 4096, "inputTokens": 12, "author": "jane", "authMethodId": "chatgpt"}',
    "risk-adjusted returns; task-runner finished; sklearn and sk-learn are fine",
    "glad the gl-matrix upgrade and global-config changes landed; see glpat-short",
    "env: production, vault: disabled",
    "2024-05-01T12:00:00Z INFO request handled in 12ms status=200",
    "",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("token", PROVIDER_TOKENS)
def test_provider_token_shapes_are_redacted_anywhere(token: str) -> None:
    text = f"call failed with {token}, retrying"
    out = redact_text(text)
    assert token not in out
    assert out == f"call failed with {REDACTED}, retrying"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-123", "Authorization: Bearer [REDACTED]"),
        ("authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization: Basic [REDACTED]"),
        ("Proxy-Authorization: token deadbeef", "Proxy-Authorization: token [REDACTED]"),
        (
            'curl -H "Authorization: Bearer s3cr3tvalue" https://api',
            'curl -H "Authorization: Bearer [REDACTED]" https://api',
        ),
        ("sent Bearer abcd1234efgh to the server", "sent Bearer [REDACTED] to the server"),
        ("bearer qwertyuiopasdfghjklzxcvbnm", "bearer [REDACTED]"),
        ('{"Authorization": "Bearer abc123"}', '{"Authorization": "Bearer [REDACTED]"}'),
    ],
)
def test_authorization_keeps_scheme_and_hides_credential(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:pass@host/x", "https://[REDACTED]@host/x"),
        ("postgres://bob:hunter2@db:5432/app", "postgres://[REDACTED]@db:5432/app"),
        ("redis://:s3cret@cache:6379/0", "redis://[REDACTED]@cache:6379/0"),
        ("amqp://u:p@ss@broker/vhost", "amqp://[REDACTED]@broker/vhost"),
        (
            "see https://bob:hunter2@example.com, then mail jane@example.com",
            "see https://[REDACTED]@example.com, then mail jane@example.com",
        ),
    ],
)
def test_url_userinfo_is_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("OPENAI_API_KEY=abc123", "OPENAI_API_KEY=[REDACTED]"),
        ("export GITHUB_TOKEN=zzz", "export GITHUB_TOKEN=[REDACTED]"),
        ("x-api-key: abcdef", "x-api-key: [REDACTED]"),
        ("client_secret=xyz&grant_type=code", "client_secret=[REDACTED]&grant_type=code"),
        ("db_password='p w'", "db_password='[REDACTED]'"),
        ('passwd="hunter2"', 'passwd="[REDACTED]"'),
        ("apikey: 42", "apikey: [REDACTED]"),
        ("private_key=-----BEGIN", "private_key=[REDACTED]"),
        ("ACCESS_KEY=a AWS_SECRET_ACCESS_KEY=b", "ACCESS_KEY=[REDACTED] AWS_SECRET_ACCESS_KEY=[REDACTED]"),
        ("session_key=abc; credentials=xyz", "session_key=[REDACTED]; credentials=[REDACTED]"),
        ("auth=letmein", "auth=[REDACTED]"),
        ("https://x/cb?access_token=abc&state=1", "https://x/cb?access_token=[REDACTED]&state=1"),
        ('{"api_key": "abc", "user": "bob"}', '{"api_key": "[REDACTED]", "user": "bob"}'),
        ('{"token": 12345, "n": 1}', '{"token": "[REDACTED]", "n": 1}'),
        ("{'password': 'hunter2'}", "{'password': '[REDACTED]'}"),
        ('{\\"refresh_token\\": \\"abc\\"}', '{\\"refresh_token\\": \\"[REDACTED]\\"}'),
        ("run --api-key abc --verbose", "run --api-key [REDACTED] --verbose"),
        ("run --api-key=abc", "run --api-key=[REDACTED]"),
        ("run --password 'a b c'", "run --password '[REDACTED]'"),
        ("run --token --verbose", "run --token --verbose"),
        ("TOKEN: [REDACTED]", "TOKEN: [REDACTED]"),
        # a quote that never closes must not let the value through
        ('password="unterminated value', "password=[REDACTED] value"),
        ("--token 'abc", "--token [REDACTED]"),
        ('x = {"token": "abc', 'x = {"token": "[REDACTED]"'),
    ],
)
def test_secret_like_keys_keep_key_and_quotes(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("use env:OPENAI_API_KEY for the key", "use [REDACTED] for the key"),
        ("from vault:secret/data/openai#api", "from [REDACTED]"),
        ("OPENAI_API_KEY=env:OPENAI_API_KEY", "OPENAI_API_KEY=[REDACTED]"),
    ],
)
def test_secret_references_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_uppercase_and_non_ascii_text_still_redacted() -> None:
    # "İ" lower-cases to two characters; positions must stay aligned with the original text.
    assert redact_text("İİ TOKEN=abc İ Password: hunter2") == "İİ TOKEN=[REDACTED] İ Password: [REDACTED]"


SECRET_SAMPLES = [
    "Authorization: Bearer abc.def-123",
    "https://bob:hunter2@example.com/x",
    "OPENAI_API_KEY=" + OPENAI_KEY,
    '{"api_key": "abc", "token": 7}',
    "--api-key " + ANTHROPIC_KEY,
    "env:GH_TOKEN",
    "Bearer abcd1234efgh",
    *PROVIDER_TOKENS,
]


def test_idempotent_on_mixed_text() -> None:
    rng = random.Random(1234)
    pieces = SECRET_SAMPLES + ORDINARY
    for _ in range(500):
        text = rng.choice([" ", "\n", "; ", ", "]).join(rng.sample(pieces, rng.randint(1, 6)))
        once = redact_text(text)
        assert redact_text(once) == once, text


def test_redacted_samples_leak_nothing() -> None:
    for secret in ("abc.def-123", "hunter2", OPENAI_KEY, ANTHROPIC_KEY, *PROVIDER_TOKENS):
        for sample in SECRET_SAMPLES:
            if secret in sample:
                assert secret not in redact_text(sample), sample


@pytest.mark.parametrize(
    "key",
    [
        "OPENAI_API_KEY", "x-api-key", "client_secret", "db_password", "passwd", "apiKey", "api.key",
        "Authorization", "auth_token", "accessToken", "private_key", "AWS_ACCESS_KEY_ID", "credentials",
        "session_key", "sessionKey", "token", "oauth",
    ],
)  # fmt: skip
def test_is_secret_key_true(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["author", "authority", "max_tokens", "inputTokens", "tokenizer", "session_id", "name", "", "keyboard"],
)
def test_is_secret_key_false(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_value_nested_and_does_not_mutate() -> None:
    original = {
        "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
        "env": {"OPENAI_API_KEY": "abc", "PATH": "/usr/bin", "PORT": 8080, "DB_PASSWORD": 1234},
        "usage": {"max_tokens": 4096, "author": "jane"},
        "flags": {"auth_required": True, "token": None, "password": ""},
        "items": [{"secret": "s"}, ("token=abc", 1), "see https://u:p@h/x"],
        "nested_tokens": {"token": {"value": "deep " + OPENAI_KEY}},
    }
    snapshot = copy.deepcopy(original)
    out = redact_value(original)
    assert original == snapshot
    assert out == {
        "headers": {"Authorization": REDACTED, "Accept": "application/json"},
        "env": {"OPENAI_API_KEY": REDACTED, "PATH": "/usr/bin", "PORT": 8080, "DB_PASSWORD": REDACTED},
        "usage": {"max_tokens": 4096, "author": "jane"},
        "flags": {"auth_required": True, "token": None, "password": ""},
        "items": [{"secret": REDACTED}, ("token=[REDACTED]", 1), "see https://[REDACTED]@h/x"],
        "nested_tokens": {"token": {"value": "deep [REDACTED]"}},
    }
    assert out["headers"] is not original["headers"]
    assert isinstance(out["items"][1], tuple)


def test_redact_value_passes_other_types_through() -> None:
    assert redact_value(3) == 3
    assert redact_value(None) is None
    assert redact_value(["x", 1.5]) == ["x", 1.5]


def test_redact_argv_hides_value_of_secret_flag() -> None:
    args = ["agent", "--api-key", OPENAI_KEY, "--password=pw", "--model", "gpt", "--token", "-v", "-p", "x"]
    assert redact_argv(args) == [
        "agent", "--api-key", REDACTED, "--password=[REDACTED]", "--model", "gpt", "--token", "-v", "-p", "x",
    ]  # fmt: skip
    assert redact_argv(["--db-password", "hunter2"]) == ["--db-password", REDACTED]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


ALPHABET = "aZ09 \n-é߷€𝄞😀中\u0301"


def test_bound_text_within_limit_is_unchanged() -> None:
    assert bound_text("héllo", 6) == "héllo"
    assert bound_text("", 0) == ""
    assert bound_tail("héllo", 6) == "héllo"


def test_bound_text_keeps_head_and_suffix() -> None:
    assert bound_text("abcdefghij", 8, suffix="..") == "abcdef.."
    assert bound_tail("abcdefghij", 8, prefix="..") == "..efghij"


def test_bound_text_limit_smaller_than_suffix() -> None:
    assert bound_text("abcdefghij", 3, suffix="...[t]") == "..."
    assert bound_tail("abcdefghij", 0) == ""
    with pytest.raises(ValueError):
        bound_text("x", -1)


def test_bound_never_exceeds_limit_or_splits_characters() -> None:
    rng = random.Random(42)
    for _ in range(2000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60)))
        limit = rng.randint(0, 120)
        head = bound_text(text, limit)
        tail = bound_tail(text, limit)
        for out in (head, tail):
            assert _utf8_len(out) <= limit
            out.encode("utf-8")  # a split character would have become a lone surrogate / invalid text
        if _utf8_len(text) <= limit:
            assert head == text and tail == text
        elif limit >= _utf8_len("...[truncated]"):
            assert head.endswith("...[truncated]") and text.startswith(head[: -len("...[truncated]")])
            assert tail.startswith("...[truncated]") and text.endswith(tail[len("...[truncated]") :])
            # maximal: the cut is at most one character (4 bytes) short of the limit
            assert _utf8_len(head) > limit - 4 and _utf8_len(tail) > limit - 4


def test_bound_tolerates_lone_surrogates() -> None:
    text = "ok \udcff" * 50
    assert len(bound_text(text, 40).encode("utf-8", "surrogatepass")) <= 40
    assert len(bound_tail(text, 40).encode("utf-8", "surrogatepass")) <= 40


# Redaction's speed (ordinary text per call, adversarial text in linear time) is measured in
# `python -m bench --only redaction`, not asserted here.


@pytest.mark.parametrize("label", ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
                                   "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
def test_a_private_key_block_is_redacted_between_its_armour_lines(label: str) -> None:
    body = "MIIEowIBAAKCAQEAsecretbody1\nb3BlbnNzaC1rZXktdjEsecretbody2\n"
    text = f"here it is:\n-----BEGIN {label}-----\n{body}-----END {label}-----\nand after"
    out = redact_text(text)
    assert "secretbody" not in out
    assert out == f"here it is:\n-----BEGIN {label}-----{REDACTED}-----END {label}-----\nand after"
    assert redact_text(out) == out


def test_a_private_key_cut_off_before_its_end_line_is_redacted_to_the_end() -> None:
    out = redact_text("key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEsecretbody")
    assert "secretbody" not in out and out.startswith("key: -----BEGIN OPENSSH PRIVATE KEY-----")
    assert redact_text(out) == out


def test_public_keys_and_certificates_are_kept() -> None:
    text = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"
    assert redact_text(text) == text


def test_an_identifier_key_then_a_blank_then_a_generated_value_is_redacted() -> None:
    assert redact_text("aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY") == (
        f"aws configure set aws_secret_access_key {REDACTED}")
    assert redact_text("export GITHUB_TOKEN 0123456789abcdef0123") == f"export GITHUB_TOKEN {REDACTED}"
    for prose in ("the api_key parameter is documented", "set auth_token later, see docs/auth.md",
                  "max_tokens 4096000000000000000 is a counter"):
        assert redact_text(prose) == prose


def test_a_long_run_of_key_words_is_data_and_a_key_after_it_is_still_found() -> None:
    run = "token" * 20_000
    assert redact_text(run) == run
    assert redact_text(f"{run} api_key=s3cr3tvalue") == f"{run} api_key={REDACTED}"
    assert redact_text("auth-" * 1000 + " password=hunter2") == "auth-" * 1000 + f" password={REDACTED}"


def test_a_registered_secret_of_any_shape_is_redacted() -> None:
    # The daemon's own API token has no recognisable prefix: it is registered at start instead.
    token = "Qm9vbGVhbkZsYWdzQXJlTm90U2VjcmV0cw_xyz-12"
    assert redact_text(f"my token is {token}.") == f"my token is {token}."
    register_secret(token)
    assert redact_text(f"my token is {token}.") == f"my token is {REDACTED}."
    register_secret("short")  # too short to be a credential: never registered, so prose stays whole
    assert redact_text("a short note") == "a short note"


def test_a_token_id_names_a_credential_and_is_not_one() -> None:
    # An actor's `token_id` (issue 49) is what `compozy token revoke` takes; the tokens themselves stay secret.
    from sessions.core.redact import is_secret_key

    assert not is_secret_key("token_id") and not is_secret_key("Token-ID")
    for key in ("token", "api_token", "access_token", "token_secret", "id_token"):
        assert is_secret_key(key), key
