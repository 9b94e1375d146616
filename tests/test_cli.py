"""The ``tensorverbs`` command: a server until SIGTERM, certs, tf-config, the demo, info."""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys

import pytest
from cryptography import x509

import tensorverbs as tv
from tensorverbs.demo import run_protocol
from tensorverbs.local_cluster import cluster_spec, free_port
from tensorverbs.resolvers import TFConfigClusterResolver

COMMAND = [sys.executable, "-m", "tensorverbs"]


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_server_command_serves_until_sigterm(tmp_path, protocol, step):
    cluster = cluster_spec({"ps": 1, "worker": 1})
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"cluster": cluster}))
    env = dict(os.environ, TENSORVERBS_PROVIDER="soft")
    proc = subprocess.Popen([*COMMAND, "server", "--cluster", str(spec), "--job", "ps", "--task", "0",
                             "--protocol", protocol], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert "serving" in proc.stdout.readline()  # blocks until the server is up
        with tv.Server(cluster, "worker", 0, protocol) as worker:
            # the command-line server holds no tensors: a recv from it times out, but is answered
            with pytest.raises(tv.DeadlineExceededError):
                worker.recv("nothing", source="/job:ps/task:0", step_id=step, timeout=1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped" in out


def test_server_command_rejects_a_bad_task(tmp_path):
    result = subprocess.run([*COMMAND, "server", "--cluster", '{"ps": ["127.0.0.1:1"]}', "--job", "ps",
                             "--task", "4"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "/job:ps/replica:0/task:4 is not in the cluster" in result.stderr


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_demo_moves_checked_bytes(protocol):
    rows = run_protocol(protocol, rounds=1, cases=[("float32", 4096), ("string", 2048)])
    assert [(r.dtype, r.nbytes, r.verified) for r in rows] == [("float32", 4096, True), ("string", 2048, True)]
    assert all(r.seconds > 0 for r in rows)


def test_info_command():
    result = subprocess.run([*COMMAND, "info"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, COLUMNS="200"))
    assert "soft" in result.stdout and "ibverbs" in result.stdout
    as_json = subprocess.run([*COMMAND, "info", "--json"], capture_output=True, text=True, timeout=60)
    info = json.loads(as_json.stdout)
    assert {"providers", "selected", "topology"} <= set(info) and "gpus" in info["topology"]


def test_certs_command_makes_a_ca_and_a_certificate_per_task(tmp_path):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["localhost:2223"]}}))
    command = [*COMMAND, "certs", str(tmp_path / "certs"), "--cluster", str(spec)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    names = sorted(os.path.basename(line) for line in result.stdout.split())
    assert names == ["ca.key", "ca.pem", "ps-0.key", "ps-0.pem", "worker-0.key", "worker-0.pem"]
    ca = x509.load_pem_x509_certificate((tmp_path / "certs" / "ca.pem").read_bytes())
    for name, host in [("ps-0", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))),
                       ("worker-0", x509.DNSName("localhost"))]:
        cert = x509.load_pem_x509_certificate((tmp_path / "certs" / f"{name}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value == \
            x509.SubjectAlternativeName([host])
        assert (tmp_path / "certs" / f"{name}.key").stat().st_mode & 0o777 == 0o600
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "exists" in again.stderr


def test_tf_config_command_prints_a_line_per_task(tmp_path):
    cluster = {"ps": ["h0:2222"], "worker": {"0": "h1:2222", "4": "h2:2222"}}
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps(cluster))
    result = subprocess.run([*COMMAND, "tf-config", str(spec)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    tasks = [("ps", 0), ("worker", 0), ("worker", 4)]
    assert [json.loads(line) for line in lines] == [
        {"cluster": cluster, "task": {"type": job, "index": index}} for job, index in tasks]
    resolvers = [TFConfigClusterResolver(environ={"TF_CONFIG": line}) for line in lines]
    assert [(r.task_type, r.task_id) for r in resolvers] == tasks
    bad = subprocess.run([*COMMAND, "tf-config", '{"ps": ["nohostport"]}'], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "expected host:port" in bad.stderr


def _run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*COMMAND, *argv], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # it ran on, as if nothing were wrong
        return subprocess.CompletedProcess(exc.cmd, None, exc.stdout or "", exc.stderr or "")


def _mistakes(tmp_path) -> list[tuple[list[str], int, str]]:
    """(arguments, exit status, what the error says) of a user's mistakes and environment errors."""
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"ps": [f"127.0.0.1:{free_port()}"]}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"ps": ["127.0.0.1:2222"],\n  oops}')
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    return [
        (["top", "nonsense:abc", "--once"], 2, "argument HOST:PORT: 'nonsense:abc': the port 'abc' is not a number"),
        (["top", "127.0.0.1", "--once"], 2, "argument HOST:PORT: '127.0.0.1' has no port"),
        (["top", "127.0.0.1:1", "--interval", "-1"], 2, "argument --interval: -1 is negative"),
        (["certs", str(a_file / "certs"), "--cluster", str(spec)], 1,
         f"tensorverbs certs: {a_file / 'certs'}: Not a directory"),
        (["certs", str(tmp_path / "certs"), "--cluster", str(spec), "--days", "-5"], 2,
         "argument --days: -5 is not a positive integer"),
        (["demo", "--rounds", "0", "--protocols", "grpc"], 2, "argument --rounds: 0 is not a positive integer"),
        (["demo", "--protocols", "tcp"], 2,
         "argument --protocols: unknown protocol 'tcp': expected one of grpc, grpc+verbs"),
        (["tf-config", str(tmp_path / "missing.json")], 2,
         f"argument cluster: no such file: {tmp_path / 'missing.json'}"),
        (["tf-config", str(bad)], 2, f"argument cluster: {bad} is not valid JSON at line 2 col 3"),
        (["tf-config", '{"ps": ["127.0.0.1:2222"]'], 2, "argument cluster: not valid JSON at line 1 col 26"),
        (["tf-config", "[1]"], 2, "argument cluster: a cluster needs at least one job"),
        (["server", "--cluster", str(spec), "--job", "ps", "--task", "0", "--startup-grace", "-1"], 2,
         "argument --startup-grace: -1 is negative"),
    ]


def test_mistakes_are_an_error_line_and_an_exit_status_not_a_traceback(tmp_path):
    wrong = []
    for argv, status, message in _mistakes(tmp_path):
        result = _run(*argv)
        # a run-time error is one line; a usage error also shows the usage, as argparse does
        lines = result.stderr.count("\n") if status == 1 else 1
        if ("Traceback" in result.stderr or (result.returncode, result.stdout, lines) != (status, "", 1)
                or message not in result.stderr):
            wrong.append(f"{argv}: exit status {result.returncode}, stdout {result.stdout[-300:]!r}, "
                         f"stderr {result.stderr[-300:]!r}")
    assert not wrong, "\n".join(wrong)


def test_server_help_gives_the_defaults():
    result = _run("server", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "(default: grpc)" in text and "(default: 60.0)" in text
