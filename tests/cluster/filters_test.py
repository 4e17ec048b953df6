#!/usr/bin/env python3
"""Unit tests of deploy/ansible/filter_plugins/hpctrain.py: the cluster-wide
decisions of the playbooks (uid choice, /etc/hosts, known_hosts), no hosts."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "ansible", "filter_plugins"))
import hpctrain as f  # noqa: E402


def passwd(**users):
    return {name: [uid, uid] for name, uid in users.items()}


def group(**groups):
    return dict(groups)


class IdPlan(unittest.TestCase):
    def test_first_id_free_on_every_host(self):
        data = {"h1": {"passwd": passwd(root=0, bob=1000), "group": group(root=0, bob=1000)},
                "h2": {"passwd": passwd(root=0), "group": group(root=0, staff=1001)}}
        plan = f.id_plan(data, "alice", 0)
        self.assertEqual(plan["uid"], 1002)
        self.assertEqual(plan["errors"], {})

    def test_existing_user_keeps_its_uid(self):
        data = {"h1": {"passwd": passwd(alice=1500), "group": group(alice=1500)},
                "h2": {"passwd": passwd(), "group": group()}}
        plan = f.id_plan(data, "alice", 0)
        self.assertEqual((plan["uid"], plan["errors"]), (1500, {}))

    def test_taken_uid_names_host_id_and_owner(self):
        data = {"h1": {"passwd": passwd(), "group": group()},
                "h3": {"passwd": passwd(squatter=2000), "group": group()}}
        plan = f.id_plan(data, "alice", 2000)
        self.assertEqual(list(plan["errors"]), ["h3"])
        msg = plan["errors"]["h3"]
        for word in ("uid 2000", "h3", "squatter", "fix:", "--uid 1000"):
            self.assertIn(word, msg)

    def test_taken_gid_is_an_error_too(self):
        data = {"h1": {"passwd": passwd(), "group": group(docker=2000)}}
        self.assertIn("gid 2000", f.id_plan(data, "alice", 2000)["errors"]["h1"])

    def test_user_with_another_uid_is_named(self):
        data = {"h1": {"passwd": passwd(alice=2000), "group": group(alice=2000)},
                "h2": {"passwd": passwd(alice=2001), "group": group(alice=2001)}}
        plan = f.id_plan(data, "alice", 2000)
        self.assertEqual(list(plan["errors"]), ["h2"])
        self.assertIn("usermod -u 2000 alice", plan["errors"]["h2"])
        disagree = f.id_plan(data, "alice", 0)
        self.assertEqual(sorted(disagree["errors"]), ["h1", "h2"])
        self.assertIn("2000 on h1", disagree["errors"]["h1"])


class EtcHosts(unittest.TestCase):
    BLOCK = ["10.0.0.1 node1", "10.0.0.2 node2"]

    def test_debian_loopback_line_goes_localhost_stays(self):
        text = "127.0.0.1\tlocalhost\n127.0.1.1\tnode1.example node1\n::1 localhost ip6-localhost\n"
        out = f.etc_hosts(text, ["node1", "node1.example"], self.BLOCK)
        self.assertNotIn("127.0.1.1", out)
        self.assertIn("127.0.0.1\tlocalhost", out)
        self.assertIn("::1 localhost ip6-localhost", out)
        self.assertIn(f.HOSTS_BEGIN + "\n10.0.0.1 node1\n10.0.0.2 node2\n" + f.HOSTS_END, out)

    def test_own_name_removed_from_a_shared_loopback_line(self):
        out = f.etc_hosts("127.0.0.1 localhost node1 other\n", ["node1"], self.BLOCK)
        self.assertIn("127.0.0.1\tlocalhost other", out)

    def test_idempotent_and_block_replaced(self):
        once = f.etc_hosts("127.0.0.1 localhost\n", ["node1"], self.BLOCK)
        self.assertEqual(f.etc_hosts(once, ["node1"], self.BLOCK), once)
        changed = f.etc_hosts(once, ["node1"], ["10.0.0.9 node9"])
        self.assertNotIn("node2", changed)
        self.assertEqual(changed.count(f.HOSTS_BEGIN), 1)

    def test_unknown_host_keeps_its_earlier_line(self):
        once = f.etc_hosts("", ["node1"], self.BLOCK)
        again = f.etc_hosts(once, ["node1"], ["10.0.0.1 node1", "10.0.0.2"])
        self.assertEqual(again, once)


class KnownHosts(unittest.TestCase):
    def test_keys_under_names_and_address_sorted(self):
        scan = "# 10.0.0.2:22 SSH-2.0\n10.0.0.2 ssh-ed25519 BBB\n10.0.0.1 ssh-ed25519 AAA\n10.0.0.9 ssh-rsa ZZZ\n"
        hosts = [{"address": "10.0.0.1", "names": ["node1"]}, {"address": "10.0.0.2", "names": []}]
        self.assertEqual(f.known_hosts(scan, hosts),
                         ["10.0.0.2 ssh-ed25519 BBB", "node1,10.0.0.1 ssh-ed25519 AAA"])


class Entries(unittest.TestCase):
    def test_names_from_inventory_and_facts(self):
        hv = {"node1.lan": {"ansible_host": "10.0.0.1", "hpct_name": "node1", "hpct_set_hostname": True},
              "10.0.0.2": {"ansible_host": "10.0.0.2", "hpct_name": "debian", "hpct_set_hostname": False},
              "10.0.0.3": {"ansible_host": "10.0.0.3", "hpct_set_hostname": False}}
        block = f.hosts_block(f.hosts_entries(hv, ["node1.lan", "10.0.0.2", "10.0.0.3"]))
        self.assertEqual(block, ["10.0.0.1 node1 node1.lan", "10.0.0.2 debian", "10.0.0.3"])

    def test_interface_holding_the_address(self):
        interfaces = {"lo": ["127.0.0.1"], "eth0": ["192.168.1.5"], "ens5": ["10.0.0.1"]}
        self.assertEqual(f.cluster_interface(interfaces, "10.0.0.1"), "ens5")
        self.assertEqual(f.cluster_interface(interfaces, "172.16.0.1"), "ens5")
        self.assertEqual(f.cluster_interface({"lo": ["127.0.0.1"]}, "10.0.0.1"), "eth0")

    def test_host_keys_under_names_and_address(self):
        hv = {"10.0.0.1": {"ansible_host": "10.0.0.1", "hpct_name": "h1",
                           "hpct_host": {"host_keys": ["ssh-ed25519 AAA", "ecdsa-sha2-nistp256 BBB"]}},
              "10.0.0.2": {"ansible_host": "10.0.0.2"}}
        self.assertEqual(f.host_key_lines(hv, ["10.0.0.1", "10.0.0.2"]),
                         ["h1,10.0.0.1 ecdsa-sha2-nistp256 BBB", "h1,10.0.0.1 ssh-ed25519 AAA"])


class ClonePlan(unittest.TestCase):
    def test_first_of_each_group_installs_the_rest_copy(self):
        keys = {"h1": "A", "h2": "B", "h3": "B", "h4": "", "h5": "B", "h6": "C"}
        self.assertEqual(f.clone_plan(keys), {"h1": "", "h2": "", "h3": "h2", "h4": "", "h5": "h2", "h6": ""})

    def test_as_many_install_as_their_kernel_has_cpus_and_the_rest_copy_them_in_turn(self):
        keys = {"h1": "K", "h2": "K", "h3": "K", "h4": "K", "h5": "K", "h6": "L"}
        cpus = {"h1": 2, "h2": 2, "h3": 2, "h4": 2, "h5": 2, "h6": 8}
        self.assertEqual(f.clone_plan(keys, cpus), {"h1": "", "h2": "", "h3": "h1", "h4": "h2", "h5": "h1", "h6": ""})
        self.assertEqual(f.clone_plan({"h1": "K", "h2": "K"}, {"h1": 4, "h2": 4}), {"h1": "", "h2": ""})

    def test_jobs_name_each_installing_host_and_its_copies_with_ssh_settings(self):
        hv = {"h2": {"ansible_host": "10.0.0.2", "ansible_user": "root", "ansible_ssh_private_key_file": "/k",
                     "ansible_ssh_common_args": "-o IdentitiesOnly=yes"},
              "h3": {"ansible_host": "10.0.0.3", "ansible_port": 2222, "ansible_user": "admin"}}
        jobs = f.clone_jobs({"h3": "h2"}, hv)
        self.assertEqual(len(jobs), 1)
        self.assertEqual(jobs[0]["from"], {"name": "h2", "host": "10.0.0.2", "port": 22, "user": "root",
                                           "key": "/k", "args": "-o IdentitiesOnly=yes"})
        self.assertEqual([(t["name"], t["host"], t["port"], t["user"]) for t in jobs[0]["to"]],
                         [("h3", "10.0.0.3", 2222, "admin")])
        self.assertEqual(f.clone_jobs({}, hv), [])


if __name__ == "__main__":
    unittest.main()
