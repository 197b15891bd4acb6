"""``muster sandbox up --image``: how the extender's container is started, without podman."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml

from extender.sandbox.config import write_kubeconfig
from extender.sandbox.image import INSIDE, container_name, run_argv, stage


def _sandbox_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "sandbox"
    (directory / "pki").mkdir(parents=True)
    directory.chmod(0o700)  # as pytest's and mkdtemp's: the image's user could not read it
    (directory / "pki" / "apiserver.crt").write_text("CA")
    write_kubeconfig(directory, port=26443)
    return directory


def test_the_container_reads_a_world_readable_copy_naming_the_ca_inside_it(
        tmp_path: Path) -> None:
    staged = stage(_sandbox_dir(tmp_path))
    config = yaml.safe_load((staged / "kubeconfig").read_text())
    [cluster] = config["clusters"]
    assert cluster["cluster"] == {"server": "https://127.0.0.1:26443",
                                  "certificate-authority": f"{INSIDE}/ca.crt"}
    assert (staged / "ca.crt").read_text() == "CA"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in staged.iterdir()} == {0o644}


def test_the_extender_runs_on_the_host_network_read_only_with_only_the_staged_folder(
        tmp_path: Path) -> None:
    staged = stage(_sandbox_dir(tmp_path))
    extra = tmp_path / "mine"
    argv = run_argv("localhost/muster:0.1.0", staged=staged, port=28888,
                    serve_args=["--bind-timeout", "15.0"], descriptor_dirs=[str(extra)])
    image_at = argv.index("localhost/muster:0.1.0")
    options, command = argv[:image_at], argv[image_at + 1:]
    assert options[:2] == ["podman", "run"]
    assert {"--rm", "--network=host", "--read-only", "--read-only-tmpfs=false",
            "--pull=never"} <= set(options)
    assert options[options.index("--name") + 1] == container_name(28888)
    mounts = [options[i + 1] for i, o in enumerate(options) if o == "-v"]
    assert mounts == [f"{staged.resolve()}:{INSIDE}:ro",
                      f"{extra.resolve()}:{INSIDE}-descriptors-0:ro"]
    assert command == ["muster", "serve", "--kubeconfig", f"{INSIDE}/kubeconfig",
                       "--host", "127.0.0.1", "--port", "28888", "--bind-timeout", "15.0",
                       "--descriptors", f"{INSIDE}-descriptors-0"]
