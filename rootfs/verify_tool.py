# The tool Verify runs inside a real jail. It reports facts; the Go side
# judges them. Standard library only.
import importlib
import importlib.util
import os
import ssl
import stat
import sys

MODULES = [
    "json", "asyncio", "ssl", "ctypes", "sqlite3", "lzma", "bz2", "zlib",
    "hashlib", "decimal", "multiprocessing", "uuid", "zoneinfo", "socket",
    "subprocess", "urllib.request", "http.client", "xml.etree.ElementTree",
    "email.message", "csv", "datetime", "re", "statistics", "concurrent.futures",
]

SKIP_WALK = ("/proc", "/sys", "/dev")


def run(args, context):
    facts = {
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "uid": os.getuid(),
        "gid": os.getgid(),
    }
    verify = ssl.get_default_verify_paths()
    facts["ca_file"] = verify.cafile or ""
    facts["ca_certs"] = len(ssl.create_default_context().get_ca_certs())

    modules = list(MODULES)
    for entry in sys.path:
        if os.path.basename(entry) == "lib-dynload" and os.path.isdir(entry):
            for name in sorted(os.listdir(entry)):
                if name.endswith(".so"):
                    modules.append(name.split(".", 1)[0])
    errors = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # report every failure, not the first
            errors[name] = "%s: %s" % (type(e).__name__, e)
    facts["modules"] = len(modules)
    facts["import_errors"] = errors

    missing = []
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None) or ""
        if path.endswith(".py") and path.startswith(("/usr/", "/opt/execgate/harness/")):
            if not os.path.exists(importlib.util.cache_from_source(path)):
                missing.append(path)
    facts["not_precompiled"] = sorted(missing)

    setid = []
    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP_WALK]
        for name in files + dirs:
            p = os.path.join(root, name)
            try:
                mode = os.lstat(p).st_mode
            except OSError:
                continue
            if mode & (stat.S_ISUID | stat.S_ISGID):
                setid.append(p)
    facts["setid"] = setid
    return facts
