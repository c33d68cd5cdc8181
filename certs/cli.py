"""``tessera certs``: create, install and rotate Tessera's TLS material.

Subcommands (all idempotent: a second run changes nothing while the material is good):

``files``      CA and one leaf certificate as files (``tls.crt``, ``tls.key``, ``ca.crt``).
``secret``     CA and leaves as Secrets in the cluster, plus the webhook's ``caBundle``.
``ca-bundle``  only set the webhook configuration's ``caBundle`` from a CA file.

Renewal keeps the CA: a leaf within ``--renew-before-days`` of expiry is re-issued by the same
CA, so nothing that trusts the CA (the webhook's caBundle, the scheduler's caFile) changes.
Exit status: 0 done (changed or not), 1 an error the message explains, 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from certs.builder import service_dns_names
from certs.errors import CertsError
from certs.files import FileStore, read_file
from certs.issue import BuilderIssuer
from certs.material import load_certs, normalise_ip
from certs.plan import LeafTarget, Outcome, ensure
from certs.renewal import LeafSpec, Policy, Usage
from tessera import logs
from tessera.serving import LOG_LEVELS

logger = logging.getLogger(__name__)

#: Where a pod finds its own namespace (the ServiceAccount volume).
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value else default


def _default_namespace() -> str | None:
    from_env = _env("TESSERA_NAMESPACE")
    if from_env:
        return from_env
    try:
        return SA_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be > 0")
    return value


def _ip(text: str) -> str:
    try:
        return normalise_ip(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _add_policy(parser: argparse.ArgumentParser) -> None:
    # String defaults on purpose: argparse runs ``type`` on them too, so a bad environment
    # value is reported like a bad flag ("argument --days: 'x' is not a whole number").
    group = parser.add_argument_group("validity")
    group.add_argument("--days", type=_positive_int,
                       default=_env("TESSERA_CERT_DAYS") or "365",
                       help="validity of a new leaf certificate (env TESSERA_CERT_DAYS; 365)")
    group.add_argument("--ca-days", type=_positive_int,
                       default=_env("TESSERA_CA_DAYS") or "3650",
                       help="validity of a new CA (env TESSERA_CA_DAYS; 3650)")
    group.add_argument("--renew-before-days", type=_positive_int,
                       default=_env("TESSERA_RENEW_BEFORE_DAYS") or "30",
                       help="re-issue a leaf with fewer days left (env "
                            "TESSERA_RENEW_BEFORE_DAYS; 30)")


def _add_kube(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster access")
    group.add_argument("--kubeconfig", default=_env("KUBECONFIG"),
                       help="kubeconfig file (env KUBECONFIG; in a pod: its ServiceAccount)")
    group.add_argument("--context", default=None, help="kubeconfig context")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument("--log-level", default=_env("TESSERA_LOG_LEVEL", "INFO"),
                        choices=LOG_LEVELS,
                        help="log level (env TESSERA_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="certs_command", required=True, metavar="ACTION")

    files = sub.add_parser(
        "files", help="write a CA and one leaf certificate as files",
        description="Write CA_DIR/ca.crt + ca.key (kept if good) and OUT/tls.crt, tls.key, "
                    "ca.crt (re-issued when missing, wrong or expiring).")
    files.add_argument("--out", type=Path, required=True,
                       help="directory for tls.crt, tls.key and ca.crt")
    files.add_argument("--ca-dir", type=Path, default=None,
                       help="directory for ca.crt and ca.key (default: --out)")
    files.add_argument("--service", help="Service name: adds its in-cluster DNS names")
    files.add_argument("--namespace", default=_default_namespace(),
                       help="namespace of --service (env TESSERA_NAMESPACE)")
    files.add_argument("--dns", action="append", default=[], metavar="NAME",
                       help="a DNS name for the certificate (repeatable)")
    files.add_argument("--ip", action="append", default=[], type=_ip, metavar="ADDRESS",
                       help="an IP address for the certificate (repeatable)")
    files.add_argument("--client", metavar="COMMON_NAME",
                       help="issue a client certificate with this common name instead")
    files.add_argument("--ca-common-name", default="tessera-ca")
    _add_policy(files)

    secret = sub.add_parser(
        "secret", help="maintain the CA and leaf Secrets and the webhook caBundle in a cluster",
        description="Keep a CA Secret and kubernetes.io/tls leaf Secrets (with ca.crt) up to "
                    "date in one namespace, then set the caBundle of the webhook "
                    "configuration to the CA.")
    secret.add_argument("--namespace", default=_default_namespace(),
                        help="namespace of the Secrets and Services (env TESSERA_NAMESPACE; "
                             "in a pod: its own)")
    secret.add_argument("--ca-secret", default="tessera-ca",
                        help="Secret holding the CA certificate and key (tessera-ca)")
    secret.add_argument("--server", action="append", default=[], type=_pair,
                        metavar="SECRET=SERVICE",
                        help="a serving certificate for SERVICE in Secret SECRET (repeatable)")
    secret.add_argument("--client", action="append", default=[], type=_pair,
                        metavar="SECRET=COMMON_NAME",
                        help="a client certificate in Secret SECRET (repeatable)")
    secret.add_argument("--webhook-configuration", metavar="NAME",
                        help="MutatingWebhookConfiguration whose caBundle is set to the CA")
    secret.add_argument("--ca-common-name", default="tessera-ca")
    _add_kube(secret)
    _add_policy(secret)

    bundle = sub.add_parser(
        "ca-bundle", help="set a webhook configuration's caBundle from a CA file",
        description="Set caBundle of every webhook of a MutatingWebhookConfiguration to the "
                    "certificates of --ca-file.")
    bundle.add_argument("--webhook-configuration", required=True, metavar="NAME")
    bundle.add_argument("--ca-file", type=Path, required=True)
    _add_kube(bundle)


def _policy(args: argparse.Namespace) -> Policy:
    try:
        return Policy(
            leaf_validity=timedelta(days=args.days),
            ca_validity=timedelta(days=args.ca_days),
            renew_before=timedelta(days=args.renew_before_days),
        )
    except ValueError as exc:
        raise CertsError(str(exc)) from exc


def _report(outcome: Outcome, ca_where: str) -> None:
    """One line per item on stdout (the Job's log); details of the decision at debug level."""
    print(f"CA ({ca_where}): {outcome.ca.action.value}: {outcome.ca.reason}")
    for target, decision in outcome.leaves:
        print(f"{target.target}: {decision.action.value}: {decision.reason}")
        logger.debug("leaf %s (%s, cn %s): %s", target.target, target.spec.usage.value,
                     target.spec.common_name, decision.action.value)


def _run_files(args: argparse.Namespace, now: datetime) -> int:
    policy = _policy(args)
    if args.service and not args.namespace:
        raise CertsError("--service needs --namespace (or TESSERA_NAMESPACE)")
    dns = set(args.dns)
    if args.service:
        dns |= set(service_dns_names(args.service, args.namespace))
    if args.client:
        cn = args.client
    elif args.service:
        cn = f"{args.service}.{args.namespace}.svc"
    elif dns or args.ip:
        cn = sorted(dns)[0] if dns else args.ip[0]
    else:
        raise CertsError("a serving certificate needs at least one DNS name or IP: give "
                         "--service, --dns or --ip")
    try:
        spec = LeafSpec(common_name=cn, usage=Usage.CLIENT if args.client else Usage.SERVER,
                        dns_names=frozenset(dns), ip_addresses=frozenset(args.ip))
    except ValueError as exc:
        raise CertsError(str(exc)) from exc
    store = FileStore(args.ca_dir or args.out)
    outcome = ensure(store, [LeafTarget(str(args.out), spec)], BuilderIssuer(), now, policy,
                     ca_common_name=args.ca_common_name)
    _report(outcome, store.describe(None))
    return 0


def _run_secret(args: argparse.Namespace, now: datetime) -> int:
    from certs.kube import KubeApi, load_api_client
    from certs.secret import SecretStore, sync_ca_bundle

    policy = _policy(args)
    if not args.namespace:
        raise CertsError("--namespace is required outside a pod (or set TESSERA_NAMESPACE)")
    if not (args.server or args.client or args.webhook_configuration):
        raise CertsError("nothing to do: give --server, --client and/or --webhook-configuration")
    targets = [
        LeafTarget(name, LeafSpec(common_name=f"{service}.{args.namespace}.svc",
                                  usage=Usage.SERVER,
                                  dns_names=frozenset(service_dns_names(service, args.namespace))))
        for name, service in args.server
    ] + [
        LeafTarget(name, LeafSpec(common_name=cn, usage=Usage.CLIENT))
        for name, cn in args.client
    ]
    api = KubeApi(load_api_client(args.kubeconfig, args.context))
    store = SecretStore(api, args.namespace, args.ca_secret)

    def add_to_bundle(ca_pem: bytes) -> None:
        if args.webhook_configuration:
            sync_ca_bundle(api, args.webhook_configuration, ca_pem, now, keep_previous=True)

    outcome = ensure(store, targets, BuilderIssuer(), now, policy,
                     ca_common_name=args.ca_common_name, after_new_ca=add_to_bundle)
    _report(outcome, store.describe(None))
    if args.webhook_configuration:
        changed = sync_ca_bundle(api, args.webhook_configuration, outcome.ca_cert_pem, now,
                                 keep_previous=outcome.ca_transition)
        state = f"updated {', '.join(changed)}" if changed else "already up to date"
        print(f"caBundle of MutatingWebhookConfiguration {args.webhook_configuration}: {state}")
    return 0


def _run_ca_bundle(args: argparse.Namespace, now: datetime) -> int:
    from certs.kube import KubeApi, load_api_client
    from certs.secret import sync_ca_bundle

    pem = read_file(args.ca_file)
    if pem is None:
        raise CertsError(f"{args.ca_file} does not exist")
    load_certs(pem, str(args.ca_file))  # refuse garbage before touching the cluster
    api = KubeApi(load_api_client(args.kubeconfig, args.context))
    changed = sync_ca_bundle(api, args.webhook_configuration, pem, now, keep_previous=False)
    state = f"updated {', '.join(changed)}" if changed else "already up to date"
    print(f"caBundle of MutatingWebhookConfiguration {args.webhook_configuration}: {state}")
    return 0


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    now = datetime.now(UTC)
    actions = {"files": _run_files, "secret": _run_secret, "ca-bundle": _run_ca_bundle}
    try:
        return actions[args.certs_command](args, now)
    except CertsError as exc:
        print(f"tessera certs {args.certs_command}: {exc}", file=sys.stderr)
        return 1
