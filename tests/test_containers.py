"""The container image and the compose file, checked as far as a machine without a Docker
engine allows: what they declare, not what a build or ``docker compose up`` would do.
Among it: the data directory is a volume, the build installs the tested versions
(``constraints.txt``), base images are exact, and PostgreSQL restarts.

What they must be: docs/operations.md, Containers.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bot.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
CONSTRAINTS = ROOT / "constraints.txt"
PYPROJECT = ROOT / "pyproject.toml"

WORKERS = ("worker-1", "worker-2")
SETTINGS = frozenset(Settings.model_fields)
DATABASE_PASSWORD = "POSTGRES_PASSWORD"
"""The one variable compose itself reads from .env: the database's password, put into
PostgreSQL's environment and into the workers' DATABASE_URL."""


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _interpolated(value: str) -> set[str]:
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", value))


def test_the_image_runs_the_app_as_a_user_who_is_not_root() -> None:
    instructions = _instructions()
    keywords = [k for k, _ in instructions]
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:")
    assert "-slim" in instructions[0][1]
    users = [rest for k, rest in instructions if k == "USER"]
    assert users, "the image must switch to an unprivileged USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    # Nothing runs as root after the switch: USER comes after the last RUN.
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    (cmd,) = [rest for k, rest in instructions if k == "CMD"]
    assert json.loads(cmd) == ["python", "-m", "bot"]
    assert any(k == "RUN" and "pip install ." in rest for k, rest in instructions)


def test_the_image_health_check_asks_healthz_on_port() -> None:
    (check,) = [rest for k, rest in _instructions() if k == "HEALTHCHECK"]
    assert "/healthz" in check
    assert "PORT" in check  # the port the app binds, not a fixed one
    assert " CMD " in f" {check} "


def test_no_settings_or_secrets_go_into_the_image() -> None:
    instructions = _instructions()
    for keyword, rest in instructions:
        if keyword in ("ENV", "ARG"):
            named = {re.split(r"[= ]", part)[0] for part in shlex.split(rest)}
            assert not named & SETTINGS, f"{keyword} {rest} bakes a setting into the image"
        if keyword in ("COPY", "ADD"):
            assert ".env" not in rest
    ignored = DOCKERIGNORE.read_text().splitlines()
    assert "*" in ignored  # only what is named goes into the build context
    assert "**/.env" in ignored


def test_compose_runs_postgres_and_two_workers_with_their_own_ids() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", *WORKERS}
    assert services["postgres"]["image"].startswith("postgres:")
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    ids = set()
    for name in WORKERS:
        worker = services[name]
        environment = worker["environment"]
        ids.add(environment["WORKER_ID"])
        url = environment["DATABASE_URL"]
        assert url.startswith("postgresql://")
        assert "@postgres:5432/" in url  # the postgres service, by its name
        assert worker["env_file"] == ".env"
        assert worker["depends_on"] == {"postgres": {"condition": "service_healthy"}}
        assert worker["build"] == "."
        assert any("/healthz" in part for part in worker["healthcheck"]["test"])
    assert len(ids) == len(WORKERS)


def test_every_variable_compose_gives_a_worker_is_a_setting() -> None:
    services = _compose()["services"]
    for name in WORKERS:
        unknown = set(services[name]["environment"]) - SETTINGS
        assert not unknown, f"{name} sets {unknown}, which the app does not read"
    text = COMPOSE.read_text()
    assert _interpolated(text) <= SETTINGS | {DATABASE_PASSWORD}
    example = (ROOT / ".env.example").read_text()
    for variable in set(services["worker-1"]["environment"]):
        assert re.search(rf"^{variable}=", example, re.MULTILINE), variable


def test_no_secret_values_in_the_container_files() -> None:
    secret_settings = {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"}
    secret_settings |= {"OPENAI_API_KEY", DATABASE_PASSWORD}
    for path in (DOCKERFILE, COMPOSE, DOCKERIGNORE):
        text = path.read_text()
        assert not re.search(r"xox[abp]-|xapp-|sk-[A-Za-z0-9]", text), path.name
        for name in secret_settings:
            for value in re.findall(rf"(?<![{{$])\b{name}[=:]\s*(\S*)", text):
                assert value.startswith("${"), f"{path.name} gives {name} a value"
    for name in WORKERS:
        url = _compose()["services"][name]["environment"]["DATABASE_URL"]
        password = url.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
        assert password.startswith("${"), "the database password comes from .env"


# -- data that outlives the container, and builds that come out the same -----------------


def test_the_default_database_lands_in_a_volume() -> None:
    instructions = _instructions()
    volumes = [rest for k, rest in instructions if k == "VOLUME"]
    workdirs = [rest for k, rest in instructions if k == "WORKDIR"]
    default = Settings.model_fields["DATABASE_URL"].default

    assert any("/data" in _paths(volume) for volume in volumes), volumes
    assert workdirs[-1] == "/data"  # the app runs there
    assert default.startswith("sqlite:///./")  # relative: the working directory, /data
    # Declared after the RUN that made /data the user's: a volume keeps what it holds then.
    keywords = [k for k, _ in instructions]
    assert keywords.index("VOLUME") > max(i for i, k in enumerate(keywords) if k == "RUN")


def _paths(volume: str) -> list[str]:
    """A VOLUME's paths: a JSON array, or words."""
    paths: list[str] = json.loads(volume) if volume.startswith("[") else volume.split()
    return paths


def test_the_image_installs_the_tested_versions() -> None:
    (install,) = [rest for k, rest in _instructions() if k == "RUN" and "pip install" in rest]
    copied = " ".join(rest for k, rest in _instructions() if k == "COPY")

    # Through the environment, so the isolated build environment is pinned as well.
    assert "PIP_CONSTRAINT=/src/constraints.txt" in install
    assert "constraints.txt" in copied.split()
    assert "!constraints.txt" in DOCKERIGNORE.read_text().splitlines()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_dependency_and_the_build_backend_are_pinned_within_their_ranges() -> None:
    project = tomllib.loads(PYPROJECT.read_text())
    required = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    pins = _pins()

    for text in required:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in constraints.txt: regenerate it"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {requirement.specifier}"
        )
    assert canonicalize_name(project["project"]["name"]) not in pins  # the project itself


def test_base_images_are_exact_versions() -> None:
    (base,) = [rest for k, rest in _instructions() if k == "FROM"]
    postgres = _compose()["services"]["postgres"]["image"]

    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    assert re.fullmatch(r"postgres:\d+\.\d+(-\w+)?(@sha256:[0-9a-f]{64})?", postgres), postgres


def test_the_database_service_comes_back_after_a_crash_or_reboot() -> None:
    services = _compose()["services"]

    for name in ("postgres", *WORKERS):
        assert services[name].get("restart") in ("unless-stopped", "always"), name


def test_the_documented_docker_run_keeps_the_data_and_can_mount_mcp_config() -> None:
    docs = (ROOT / "docs" / "operations.md").read_text()
    runs = [line.strip() for line in docs.splitlines() if line.strip().startswith("docker run ")]

    assert runs
    assert all(re.search(r"(-v|--volume|--mount)\s+\S+:/data\b", run) for run in runs), runs
    assert any("MCP_CONFIG=" in run and ":ro" in run for run in runs), runs


def test_env_example_names_every_variable_compose_reads_from_it() -> None:
    example = (ROOT / ".env.example").read_text()

    for variable in _interpolated(COMPOSE.read_text()):
        assert re.search(rf"^{variable}=", example, re.MULTILINE), variable
