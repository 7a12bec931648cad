"""``devicefit profiles list|show|validate``."""

from __future__ import annotations

import argparse

from devicefit.sdk.console import first_fit, make_console, print_json, table
from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.units import decimal_prefixes, format_size, format_time_ms
from devicefit.simulator.judge.verdict import device_warnings
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import ProfileStore, dump_resolved, load_profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profiles", description="Device profiles: built-in ones and your own.",
                       epilog="example: devicefit profiles show stm32l4r5-cortex-m4")
    psub = p.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)
    ls = psub.add_parser("list", help="table of the available profiles",
                         epilog="example: devicefit --profiles-dir ./my_profiles profiles list")
    ls.add_argument("--all", action="store_true", help="include abstract base profiles")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=_list)
    show = psub.add_parser("show", help="a profile after inheritance, as YAML",
                           epilog="example: devicefit profiles show esp32-s3")
    show.add_argument("name", help="profile name or path to a .yaml file")
    show.set_defaults(handler=_show)
    val = psub.add_parser("validate", help="check profile files; exit 2 on the first bad file",
                          epilog="example: devicefit profiles validate my_board.yaml")
    val.add_argument("files", nargs="+", help="profile .yaml files")
    val.set_defaults(handler=_validate)


def _summary(p: Profile) -> dict:
    return {
        "name": p.name, "class": p.device.kind, "runtime": p.runtime.name,
        "flash_budget_bytes": p.budgets.flash_bytes, "arena_budget_bytes": p.budgets.arena_bytes,
        "latency_budget_ms": p.budgets.latency_ms, "description": p.description,
        "path": str(p.path),
    }


def _list(args: argparse.Namespace) -> int:
    store = ProfileStore(args.profiles_dir)
    profiles = [store.load(n) for n in store.names(include_abstract=args.all)]
    if args.json:
        print_json([_summary(p) for p in profiles])
        return 0
    rows = [(p.name, p.device.kind, p.runtime.name, _budget(p.budgets.flash_bytes),
             _budget(p.budgets.arena_bytes), format_time_ms(p.budgets.latency_ms),
             p.description) for p in profiles]
    heads = ["name", "class", "runtime", "flash", "arena", "latency", "description"]
    # A terminal too narrow for the descriptions gets one line per profile without them
    # (81 lines of blocks at 80 columns otherwise); `profiles show` has them.
    make_console(args.no_color).print(first_fit(
        table("Device profiles", heads, rows),
        table("Device profiles (descriptions: devicefit profiles show NAME)", heads[:-1],
              [row[:-1] for row in rows], names=[0])))
    return 0


def _budget(size: int | None) -> str:
    """A size budget in the prefixes it was written with (50MB, not 47.7 MiB)."""
    return format_size(size, size is not None and decimal_prefixes(size))


def _show(args: argparse.Namespace) -> int:
    profile = load_profile(args.name, args.profiles_dir)
    chain = " <- ".join([profile.name, *profile.extends])
    print(clean(f"# {profile.path}\n# inheritance: {chain}"))
    print(dump_resolved(profile), end="")
    return 0


def _validate(args: argparse.Namespace) -> int:
    errors: list[str] = []
    for f in args.files:
        try:
            profile = load_profile(f, args.profiles_dir)
        except DevicefitError as exc:
            errors.append(str(exc))
        else:
            warnings = [*profile.warnings, *(f"{f}: warning: {w}" for w in device_warnings(profile))]
            print(clean("\n".join([f"{f}: ok", *warnings])))
    if errors:
        raise DevicefitError("; ".join(errors) if len(errors) > 1 else errors[0])
    return 0
