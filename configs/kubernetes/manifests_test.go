// Package kubernetes_test checks the Kubernetes manifests in this
// directory without a cluster: each object decodes strictly (an unknown,
// misspelt or duplicate field fails) into the Kubernetes API's Go types
// (k8s.io/api), the PodMonitor into the Prometheus Operator's
// (monitoring/v1) and the kustomizations into kustomize's; then the
// references between them hold (names, ports, labels, $(VAR)s, the
// worker count).
package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kustomize "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// decoder decodes YAML strictly into the registered types.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
}

// decodeAll decodes every YAML document of data strictly.
func decodeAll(dec runtime.Decoder, data []byte) ([]runtime.Object, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

// manifests are the files holding Kubernetes objects.
var manifests = []string{
	"replay/job.yaml", "replay/volumes.yaml", "replay/merge-pod.yaml",
	"sidecar/deployment.yaml", "sidecar/service.yaml", "sidecar/podmonitor.yaml",
}

// loaded is every object of the manifests, by file.
type loaded map[string][]runtime.Object

func load(t *testing.T) loaded {
	t.Helper()
	dec := decoder(t)
	l := loaded{}
	for _, f := range manifests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(dec, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(objs) == 0 {
			t.Fatalf("%s: no objects", f)
		}
		l[f] = objs
	}
	return l
}

func one[T runtime.Object](t *testing.T, l loaded, file string) T {
	t.Helper()
	for _, o := range l[file] {
		if v, ok := o.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("%s: no %T", file, zero)
	return zero
}

// loadKustomization decodes a kustomization strictly.
func loadKustomization(t *testing.T, path string) *kustomize.Kustomization {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomize.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &k
}

// TestManifestsDecodeStrictly: every manifest and kustomization decodes
// strictly; the same files with a field misspelt do not.
func TestManifestsDecodeStrictly(t *testing.T) {
	l := load(t)
	if n := len(l["replay/volumes.yaml"]); n != 2 {
		t.Errorf("volumes.yaml: %d objects, want 2", n)
	}
	for _, k := range []string{"replay/kustomization.yaml", "sidecar/kustomization.yaml"} {
		kz := loadKustomization(t, k)
		for _, r := range kz.Resources {
			if _, err := os.Stat(filepath.Join(filepath.Dir(k), r)); err != nil {
				t.Errorf("%s: resource %s: %v", k, r, err)
			}
		}
	}

	dec := decoder(t)
	for _, tc := range []struct{ file, from, to string }{
		{"replay/job.yaml", "completionMode:", "completionsMode:"},
		{"replay/job.yaml", "mountPath:", "mountpath:"},
		{"sidecar/deployment.yaml", "containerPort:", "containerport:"},
		{"sidecar/podmonitor.yaml", "podMetricsEndpoints:", "podMetricEndpoints:"},
		{"sidecar/service.yaml", "clusterIP:", "clusterIp:"},
	} {
		data, _ := os.ReadFile(tc.file)
		bad := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
		if _, err := decodeAll(dec, bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s with %s misspelt %s: %v, want an unknown field error", tc.file, tc.from, tc.to, err)
		}
	}
	data, _ := os.ReadFile("replay/kustomization.yaml")
	var k kustomize.Kustomization
	if err := yaml.UnmarshalStrict(bytes.Replace(data, []byte("configMapGenerator:"), []byte("configMapGenerators:"), 1), &k); err == nil {
		t.Error("kustomization with configMapGenerators: decoded, want an unknown field error")
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkVars fails for a $(VAR) in c's args or command that c's env does
// not define: Kubernetes would pass it on as written.
func checkVars(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		for _, m := range varRef.FindAllStringSubmatch(a, -1) {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == m[1] }) {
				t.Errorf("%s: container %s: %s uses $(%s), which its env does not define", where, c.Name, a, m[1])
			}
		}
	}
}

// checkMounts fails for a volume mount of a volume the pod lacks.
func checkMounts(t *testing.T, where string, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				t.Errorf("%s: container %s mounts volume %s, which the pod lacks", where, c.Name, m.Name)
			}
		}
	}
}

// literals returns a configMapGenerator's literals as a map.
func literals(t *testing.T, k *kustomize.Kustomization, name string) map[string]string {
	t.Helper()
	for _, g := range k.ConfigMapGenerator {
		if g.Name == name {
			m := map[string]string{}
			for _, kv := range g.LiteralSources {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			return m
		}
	}
	t.Fatalf("no configMapGenerator %s", name)
	return nil
}

// TestReplayJob: the Indexed Job gives each pod its index as --partition
// INDEX/WORKERS and one start time, reads the capture from a volume, and
// its settings, worker count and claims agree with the kustomization and
// volumes.yaml.
func TestReplayJob(t *testing.T) {
	l := load(t)
	job := one[*batchv1.Job](t, l, "replay/job.yaml")
	k := loadKustomization(t, "replay/kustomization.yaml")
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %v, want Indexed", job.Spec.CompletionMode)
	}
	settings := literals(t, k, "replay-settings")
	workers, err := strconv.Atoi(settings["WORKERS"])
	if err != nil {
		t.Fatalf("WORKERS=%q: %v", settings["WORKERS"], err)
	}
	if job.Spec.Completions == nil || job.Spec.Parallelism == nil || int(*job.Spec.Completions) != workers || int(*job.Spec.Parallelism) != workers {
		t.Errorf("completions %v, parallelism %v; want both WORKERS (%d): every worker at once", job.Spec.Completions, job.Spec.Parallelism, workers)
	}
	var patched []string
	for _, p := range k.Patches {
		patched = append(patched, p.Patch)
	}
	for _, path := range []string{"/spec/completions", "/spec/parallelism"} {
		if want := fmt.Sprintf("path: %s\n  value: %d", path, workers); !strings.Contains(strings.Join(patched, "\n"), want) {
			t.Errorf("kustomization does not set %s to WORKERS (%d)", path, workers)
		}
	}
	spec := job.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	checkVars(t, "job", c)
	checkMounts(t, "job", spec)
	for _, want := range []string{"replay", "--partition=$(INDEX)/$(WORKERS)", "--start-at=$(START_AT)", "--json=/results/worker-$(INDEX).json"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("job args %q lack %q", c.Args, want)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Name == "INDEX":
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
				t.Errorf("INDEX is not the pod's completion index: %+v", e.ValueFrom)
			}
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if _, ok := settings[ref.Key]; ref.Name != "replay-settings" || !ok {
				t.Errorf("env %s reads %s/%s, which the kustomization does not generate", e.Name, ref.Name, ref.Key)
			}
		}
	}
	claims := map[string]bool{}
	for _, o := range l["replay/volumes.yaml"] {
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok {
			claims[pvc.Name] = true
		}
	}
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim == nil || !claims[v.PersistentVolumeClaim.ClaimName] {
			t.Errorf("volume %s is not a claim of volumes.yaml", v.Name)
		}
	}
	merge := one[*corev1.Pod](t, l, "replay/merge-pod.yaml")
	checkMounts(t, "merge pod", merge.Spec)
	if img := k.Images[0]; merge.Spec.Containers[0].Image != img.NewName+":"+img.NewTag || c.Image != img.Name {
		t.Errorf("images: job %s, merge pod %s; the kustomization sets %s to %s:%s", c.Image, merge.Spec.Containers[0].Image, img.Name, img.NewName, img.NewTag)
	}
}

// TestSidecar: the app reaches the proxy on loopback at the address the
// proxy listens on; the proxy is a native sidecar; the headless Service
// and the PodMonitor select the app's pods and name a port the proxy
// has.
func TestSidecar(t *testing.T) {
	l := load(t)
	d := one[*appsv1.Deployment](t, l, "sidecar/deployment.yaml")
	spec := d.Spec.Template.Spec
	checkMounts(t, "deployment", spec)
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want the proxy and the app", len(spec.InitContainers), len(spec.Containers))
	}
	proxy, app := spec.InitContainers[0], spec.Containers[0]
	checkVars(t, "deployment", proxy)
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the proxy is not a sidecar (restartPolicy Always): %v", proxy.RestartPolicy)
	}
	var listen string
	for _, a := range proxy.Args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			listen = v
		}
	}
	_, port, _ := strings.Cut(listen, ":")
	i := slices.IndexFunc(app.Env, func(e corev1.EnvVar) bool { return e.Name == "REDIS_ADDR" })
	if !strings.HasPrefix(listen, "127.0.0.1:") || i < 0 || app.Env[i].Value != "localhost:"+port {
		t.Errorf("proxy --listen=%s, app env %v: want the app pointed at the proxy on loopback", listen, app.Env)
	}
	labels := d.Spec.Template.Labels
	sub := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	portNames := map[string]int32{}
	for _, p := range proxy.Ports {
		portNames[p.Name] = p.ContainerPort
	}
	svc := one[*corev1.Service](t, l, "sidecar/service.yaml")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !sub(svc.Spec.Selector) {
		t.Errorf("service: clusterIP %q, selector %v; want headless, selecting %v", svc.Spec.ClusterIP, svc.Spec.Selector, labels)
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := portNames[p.TargetPort.String()]; !ok {
			t.Errorf("service port %s targets %s, not a port of the proxy %v", p.Name, p.TargetPort.String(), portNames)
		}
	}
	pm := one[*monitoringv1.PodMonitor](t, l, "sidecar/podmonitor.yaml")
	if !sub(pm.Spec.Selector.MatchLabels) {
		t.Errorf("podmonitor selects %v, not the app's pods %v", pm.Spec.Selector.MatchLabels, labels)
	}
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if ep.Port == nil || portNames[*ep.Port] == 0 || ep.Path != "/metrics" {
			t.Errorf("podmonitor endpoint port %v path %s: want a port of the proxy %v, /metrics", ep.Port, ep.Path, portNames)
		}
	}
	k := loadKustomization(t, "sidecar/kustomization.yaml")
	if len(k.Images) != 1 || k.Images[0].Name != proxy.Image {
		t.Errorf("kustomization images %+v, want one for %s", k.Images, proxy.Image)
	}
}
