"""``harness profiles``: the hardware profiles, and whether each is present on this machine."""

from __future__ import annotations

import click
import yaml

from harness.hw_profiles import (
    LOCAL,
    DetectedHardware,
    Profile,
    detect,
    format_bytes,
    list_profiles,
    load_profile,
    profile_present,
)

_COLUMNS = ("NAME", "NODES x ACCEL", "ACCELERATOR", "HBM/DEVICE", "DDR/NODE", "BACKEND", "PRESENT")


@click.group(invoke_without_command=True)
@click.pass_context
def profiles(ctx: click.Context) -> None:
    """List the hardware profiles (``local``, the default, is this machine as detected)."""
    if ctx.invoked_subcommand is not None:
        return
    detected = detect()
    rows = [_row(profile, detected) for profile in list_profiles(detected=detected)]
    click.echo(_table([_COLUMNS, *rows]))


@profiles.command()
@click.argument("name")
def show(name: str) -> None:
    """Show profile NAME as YAML (a profile name, or the path of a profile .yaml file)."""
    detected = detect()
    profile = load_profile(name, detected=detected)
    click.echo(yaml.safe_dump(profile.to_dict(), sort_keys=False, allow_unicode=True, width=10_000), nl=False)
    if profile.name == LOCAL:
        click.echo("---")
        click.echo(yaml.safe_dump({"detected": detected.to_dict()}, sort_keys=False, allow_unicode=True), nl=False)
    present, reason = profile_present(profile, detected)
    click.echo(f"# present on this machine: {'yes' if present else 'no'} ({reason})")


def _row(profile: Profile, detected: DetectedHardware) -> tuple[str, ...]:
    present, _ = profile_present(profile, detected)
    return (
        profile.name,
        f"{profile.nodes} x {profile.accelerators_per_node}",
        profile.accelerator or "- (CPU only)",
        format_bytes(profile.hbm.capacity_bytes) if profile.hbm.present else "-",
        format_bytes(profile.ddr.capacity_bytes, binary=profile.name == LOCAL),
        profile.collective_backend.value,
        "yes" if present else "no",
    )


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
