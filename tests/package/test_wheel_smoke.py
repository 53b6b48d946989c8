"""The wheel's smoke test (``wheel_smoke.py``, which ``scripts/wheel`` runs in a fresh venv
against the installed wheel) holds against the development build too, so it is kept honest by the
suite and not only when a wheel is built."""

from __future__ import annotations

from tests.package import wheel_smoke


def test_typing_files_and_core_ship() -> None:
    package = wheel_smoke.check_files()
    assert (package / "__init__.py").is_file()


def test_console_script_help() -> None:
    wheel_smoke.check_cli()


def test_one_failure_and_one_resume_on_the_real_clock() -> None:
    wheel_smoke.check_failure_and_resume()
