//! The PJRT runtime against a real plugin (the CPU plugin setup.sh caches).

mod store;

use store::CountedStore;

use ember_accel_tpu_xla::pjrt::{
    Api, Buffer, Client, ElementType, Executable, OptionValue, plugin,
};

fn client() -> Option<Client> {
    match plugin::find() {
        Ok(path) => Some(Client::new(Api::load(&path).expect("load plugin")).expect("client")),
        Err(e) => {
            eprintln!("skip: {e}");
            None
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const ADD: &str = r#"
func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<f32>) {
  %s = "stablehlo.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %z = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %r = "stablehlo.reduce"(%s, %z) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %t = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%t) : (tensor<f32>) -> ()
  }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
  return %s, %r : tensor<2x3xf32>, tensor<f32>
}
"#;

#[test]
fn compiles_runs_and_reads_back_on_every_device() {
    let Some(client) = client() else { return };
    assert!(client.device_count() >= 1, "a plugin with no devices");
    let exe = client.compile(ADD).expect("compile");
    assert_eq!(exe.output_count(), 2);
    for device in 0..client.device_count() {
        let a = client
            .upload(
                &f32_bytes(&[1., 2., 3., 4., 5., 6.]),
                ElementType::F32,
                &[2, 3],
                device,
            )
            .unwrap();
        let b = client
            .upload(&f32_bytes(&[10.; 6]), ElementType::F32, &[2, 3], device)
            .unwrap();
        let out = client.execute(&exe, &[&a, &b], device).expect("execute");
        let mut sum = vec![0u8; 24];
        out[0].download(&mut sum).unwrap();
        assert_eq!(sum, f32_bytes(&[11., 12., 13., 14., 15., 16.]));
        let mut total = [0u8; 4];
        out[1].download(&mut total).unwrap();
        assert_eq!(f32::from_le_bytes(total), 81.0);
    }
}

/// `a` is donated to the result: the program writes `a + b` in `a`'s memory.
const ADD_IN_PLACE: &str = r#"
func.func @main(%a: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %b: tensor<3xf32>) -> (tensor<3xf32>) {
  %s = "stablehlo.add"(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %s : tensor<3xf32>
}
"#;

#[test]
fn a_donated_input_is_consumed_by_the_run() {
    let Some(client) = client() else { return };
    let exe = client.compile(ADD_IN_PLACE).expect("compile");
    let upload = |v: &[f32]| {
        client
            .upload(&f32_bytes(v), ElementType::F32, &[3], 0)
            .unwrap()
    };
    let (a, b) = (upload(&[1., 2., 3.]), upload(&[10., 20., 30.]));
    let out = client.execute(&exe, &[&a, &b], 0).expect("execute");
    let mut sum = vec![0u8; 12];
    out[0].download(&mut sum).unwrap();
    assert_eq!(sum, f32_bytes(&[11., 22., 33.]));
    // The plugin took `a`'s buffer for the result; `b` is untouched.
    let err = a.download(&mut sum).expect_err("a was donated");
    assert!(
        err.message.contains("donated") || err.message.contains("deleted"),
        "{err}"
    );
    b.download(&mut sum).unwrap();
    assert_eq!(sum, f32_bytes(&[10., 20., 30.]));
}

#[test]
fn a_bad_program_is_an_error_carrying_the_plugins_message() {
    let Some(client) = client() else { return };
    let err = client
        .compile("func.func @main() { nonsense }")
        .err()
        .expect("must fail");
    assert_eq!(err.call, "PJRT_Client_Compile");
    assert!(!err.message.is_empty(), "{err}");
}

/// The client, when its plugin has 4 devices (saying why not when it has not).
fn four_device_client() -> Option<Client> {
    let client = client()?;
    if client.device_count() < 4 {
        eprintln!(
            "skip: the plugin has {} device(s), not 4",
            client.device_count()
        );
        return None;
    }
    Some(client)
}

/// Runs `exe` (compiled for 4 replicas or partitions) with device `i`'s arguments `inputs[i]`;
/// each device's outputs.
fn run_on_each(client: &Client, exe: &Executable, inputs: &[Vec<Buffer>]) -> Vec<Vec<Buffer>> {
    let args: Vec<Vec<&Buffer>> = inputs.iter().map(|i| i.iter().collect()).collect();
    let args: Vec<&[&Buffer]> = args.iter().map(Vec::as_slice).collect();
    let out = client.execute_replicated(exe, &args).expect("execute");
    assert_eq!(out.len(), inputs.len(), "one output list per device");
    out
}

/// Each replica's `a`, summed over the four replicas by an all-reduce inside the program.
const ALL_REDUCE: &str = r#"
func.func @main(%a: tensor<3xf32>) -> (tensor<3xf32>) {
  %s = "stablehlo.all_reduce"(%a) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %t = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%t) : (tensor<f32>) -> ()
  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<3xf32>) -> tensor<3xf32>
  return %s : tensor<3xf32>
}
"#;

#[test]
fn a_program_compiled_for_four_replicas_all_reduces_across_the_devices() {
    let Some(client) = four_device_client() else {
        return;
    };
    let exe = client
        .compile_replicated(ALL_REDUCE, 4)
        .expect("compile for 4 replicas");
    let inputs: Vec<Vec<Buffer>> = (0..4)
        .map(|replica| {
            let r = replica as f32;
            let values = f32_bytes(&[r, 1.0, 10.0 * r]);
            vec![(client.upload(&values, ElementType::F32, &[3], replica)).unwrap()]
        })
        .collect();
    for replica in &run_on_each(&client, &exe, &inputs) {
        let mut sum = vec![0u8; 12];
        replica[0].download(&mut sum).unwrap();
        assert_eq!(sum, f32_bytes(&[6.0, 4.0, 60.0]));
    }
}

/// `sum((x·w)²)` with `x` `[8, 2]` split by rows over 4 devices and `w` replicated: the SPMD
/// partitioner gives each device 2 rows and adds the all-reduce that sums their parts.
const PARTITIONED: &str = r#"
module @partitioned attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<8x2xf32> {mhlo.sharding = "{replicated}"}, %w: tensor<2x3xf32> {mhlo.sharding = "{replicated}"}) -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
    %xs = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{devices=[4,1]0,1,2,3}"} : (tensor<8x2xf32>) -> tensor<8x2xf32>
    %y = "stablehlo.dot_general"(%xs, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<8x2xf32>, tensor<2x3xf32>) -> tensor<8x3xf32>
    %sq = "stablehlo.multiply"(%y, %y) : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
    %z = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %r = "stablehlo.reduce"(%sq, %z) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %t = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%t) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0, 1>} : (tensor<8x3xf32>, tensor<f32>) -> tensor<f32>
    return %r : tensor<f32>
  }
}
"#;

#[test]
fn a_program_partitioned_over_four_devices_gives_the_whole_result_on_each() {
    let Some(client) = four_device_client() else {
        return;
    };
    let exe = client
        .compile_partitioned(PARTITIONED, 4)
        .expect("compile for 4 partitions");
    // The partitioner split the rows and joined the parts with an all-reduce; compiled for
    // one device, the same program has none.
    let contains = |hlo: &[u8], what: &str| hlo.windows(what.len()).any(|w| w == what.as_bytes());
    assert!(contains(&exe.optimized_program().unwrap(), "all-reduce"));
    let whole = client.compile(PARTITIONED).expect("compile for one device");
    assert!(!contains(&whole.optimized_program().unwrap(), "all-reduce"));
    let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 1.0).collect();
    let w = [0.5f32, -1.0, 2.0, 1.5, 0.25, -0.5];
    let expected: f32 = (0..8)
        .flat_map(|r| (0..3).map(move |c| (r, c)))
        .map(|(r, c)| {
            let y = x[2 * r] * w[c] + x[2 * r + 1] * w[3 + c];
            y * y
        })
        .sum();
    let inputs: Vec<Vec<Buffer>> = (0..4)
        .map(|device| {
            let upload = |v: &[f32], dims: &[i64]| {
                client
                    .upload(&f32_bytes(v), ElementType::F32, dims, device)
                    .unwrap()
            };
            vec![upload(&x, &[8, 2]), upload(&w, &[2, 3])]
        })
        .collect();
    for device in &run_on_each(&client, &exe, &inputs) {
        let mut sum = [0u8; 4];
        device[0].download(&mut sum).unwrap();
        let got = f32::from_le_bytes(sum);
        assert!(
            (got - expected).abs() < 1e-4 * expected,
            "{got} vs {expected}"
        );
    }
}

/// The pinned CPU plugin (setup.sh caches it), or why a test skips.
fn pinned_cpu_plugin() -> Option<&'static Api> {
    let Ok(path) = plugin::find() else {
        eprintln!("skip: no PJRT plugin");
        return None;
    };
    if path.file_name() != Some(std::ffi::OsStr::new(plugin::CACHED_PLUGIN)) {
        eprintln!("skip: {} is not the pinned CPU plugin", path.display());
        return None;
    }
    Some(Api::load(&path).expect("load plugin"))
}

/// The CPU plugin makes a client of as many devices as asked (`cpu_device_count`; 4 unless
/// asked): what a process of a run over several hosts would take as its share.
#[test]
fn the_cpu_plugin_makes_the_devices_asked_for() {
    let Some(api) = pinned_cpu_plugin() else {
        return;
    };
    let two = Client::with_options(api, &[("cpu_device_count", OptionValue::Int(2))]).unwrap();
    assert_eq!(two.device_count(), 2);
}

/// What stops a run over several hosts on the pinned CPU plugin: it takes a key-value store
/// and never calls it (its C API client has no distributed runtime), and it refuses the
/// options that would say which of several processes it is.
#[test]
fn the_cpu_plugin_takes_a_store_but_has_no_distributed_runtime() {
    let Some(api) = pinned_cpu_plugin() else {
        return;
    };
    let store = std::sync::Arc::new(CountedStore::default());
    let two = [("cpu_device_count", OptionValue::Int(2))];
    let client = Client::with_store(api, &two, store.clone()).unwrap();
    assert_eq!(client.device_count(), 2);
    assert_eq!(
        client.global_device_count().unwrap(),
        2,
        "no other process's devices"
    );
    drop(client);
    assert_eq!(store.calls(), (0, 0));
    for option in ["num_nodes", "node_id"] {
        let asked = [two[0], (option, OptionValue::Int(2))];
        let err = Client::with_store(api, &asked, store.clone()).err();
        let err = err.expect("the CPU plugin refuses the option").to_string();
        assert!(
            err.contains("PJRT_Client_Create") && err.contains(option),
            "{err}"
        );
    }
}
