# jupyterhub_config.py for a kwnb workshop: the one tests/test_hub_workshop.py starts (`jupyterhub -f` this file),
# and the one docs/organiser.md explains. Learners are Unix users (useradd); each gets a server of its own on
# 127.0.0.1 behind configurable-http-proxy, inside cgroups holding it to mem_limit and cpu_limit (hub_spawner.py).
# The KWNB_HUB_* variables are how the test gives its ports and folders; an organiser writes values instead.
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)

folder = Path(os.environ.get("KWNB_HUB_FOLDER", "/srv/jupyterhub"))  # the hub's database, secret and pid files
learners = set(filter(None, os.environ.get("KWNB_HUB_USERS", "").split(",")))

# Where the hub listens: everything on loopback here; a real hub binds the proxy's public side to its address.
c.JupyterHub.bind_url = f"http://127.0.0.1:{os.environ.get('KWNB_HUB_PORT', '8000')}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("KWNB_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('KWNB_HUB_PROXY_API_PORT', '8001')}"
c.ConfigurableHTTPProxy.command = [os.environ.get("KWNB_HUB_CHP", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(folder / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{folder / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(folder / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(folder / "jupyterhub.pid")

# Who may log in. The dummy authenticator (one shared password) suits a class on loopback; use PAM or OAuth
# on a hub learners reach over the network.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ.get("KWNB_HUB_PASSWORD") or None
c.Authenticator.allowed_users = learners

# A token for the organiser's scripts (and the test): make users' tokens, start and stop their servers.
if os.environ.get("KWNB_HUB_TOKEN"):
    c.JupyterHub.services = [{"name": "organiser", "api_token": os.environ["KWNB_HUB_TOKEN"]}]
    c.JupyterHub.load_roles = [{"name": "organiser", "services": ["organiser"],
                                "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}]

# Each learner's server: a local process as that user, in cgroups of its own (hub_spawner.py), limited to
# 2 GB and 1 CPU. LocalProcessSpawner passes MEM_LIMIT and CPU_LIMIT to the server, where kwnb reads them
# (and the cgroup) to size each task's threads and its warm pool.
sys.path.insert(0, str(Path(__file__).resolve().parent))
c.JupyterHub.spawner_class = "hub_spawner.CgroupSpawner"
c.Spawner.mem_limit = os.environ.get("KWNB_HUB_MEM_LIMIT", "2G")
c.Spawner.cpu_limit = float(os.environ.get("KWNB_HUB_CPU_LIMIT", "1"))
c.Spawner.ip = "127.0.0.1"
c.Spawner.cmd = [str(Path(sys.executable).with_name("jupyterhub-singleuser"))]  # the hub's own environment
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120  # a crowded 2-core machine takes its time to import Jupyter
c.Spawner.http_timeout = 120
# What the learners' servers and kernels inherit: no KWNB_NETWORK, so kwnb chooses a private network for each
# run wherever it can (user namespaces; JUPYTERHUB_USER tells it others share the machine). KWNB_OFFLINE=1
# where the hub has no way out: the MNIST notebooks then use kwnb's shipped sample.
c.Spawner.environment = {name: os.environ[name] for name in ("KWNB_OFFLINE", "KWNB_NETWORK", "KWNB_WARM")
                         if name in os.environ}
if os.environ.get("KWNB_HUB_PYTHONPATH"):  # the test's kwnb checkout
    c.Spawner.environment["PYTHONPATH"] = os.environ["KWNB_HUB_PYTHONPATH"]
