//! SLURM node lists: `node[01-04,07],gpu5`, `alpha beta`, `1.2.3.[089, 100-110]`.

/// Most hosts a SLURM node list may expand to.
const MAX_HOSTS: usize = 1 << 16;

/// The first host of a SLURM node list such as `node[01-04,07],gpu5` or `alpha beta`.
pub fn first_host(nodelist: &str) -> Result<String, String> {
    expand_hostlist(nodelist)?
        .into_iter()
        .next()
        .ok_or_else(|| "expected a SLURM node list such as node[01-04,07]".to_owned())
}

/// Expands a SLURM host list (`a[1-3,5]b,c`, zero padding kept, several bracket groups
/// allowed; hosts separated by commas or spaces).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top_level(list)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        hosts.extend(expand_item(item)?);
        if hosts.len() > MAX_HOSTS {
            return Err(format!("node list expands to more than {MAX_HOSTS} hosts"));
        }
    }
    Ok(hosts)
}

/// Splits on commas and whitespace that are not inside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' | ' ' | '\t' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced or nested brackets in node list".to_owned());
        }
    }
    if depth != 0 {
        return Err("unbalanced brackets in node list".to_owned());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

fn expand_item(item: &str) -> Result<Vec<String>, String> {
    let Some(open) = item.find('[') else {
        return Ok(vec![item.to_owned()]);
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or("unbalanced brackets in node list")?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = expand_item(rest)?;
    let mut out = Vec::new();
    for range in ranges.split(',') {
        for number in expand_range(range.trim())? {
            for tail in &tails {
                out.push(format!("{prefix}{number}{tail}"));
                if out.len() > MAX_HOSTS {
                    return Err(format!("node list expands to more than {MAX_HOSTS} hosts"));
                }
            }
        }
    }
    Ok(out)
}

/// `01-04` → `01 02 03 04`; `7` → `7`.
fn expand_range(range: &str) -> Result<Vec<String>, String> {
    let bad = || format!("bad range `{range}` in node list; expected N or N-M");
    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
    let width = lo.len();
    let lo_n: u64 = lo.parse().map_err(|_| bad())?;
    let hi_n: u64 = hi.parse().map_err(|_| bad())?;
    if hi_n < lo_n || hi_n - lo_n >= MAX_HOSTS as u64 {
        return Err(bad());
    }
    Ok((lo_n..=hi_n).map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists() {
        assert_eq!(
            expand_hostlist("node[01-04,07]").unwrap(),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(expand_hostlist("a,b[1-2]").unwrap(), ["a", "b1", "b2"]);
        assert_eq!(
            expand_hostlist("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(first_host("gpu-[9-10]").unwrap(), "gpu-9");
        assert!(expand_hostlist("n[1-").is_err());
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[0-99999999999]").is_err());
        assert!(first_host("").is_err());
    }

    /// The node list forms Lightning's SLURM tests cover, with the root host each gives.
    #[test]
    fn the_first_host_of_each_form_lightning_reads() {
        for (list, first) in [
            ("127.0.0.1", "127.0.0.1"),
            ("alpha", "alpha"),
            ("alpha,beta,gamma", "alpha"),
            ("alpha beta gamma", "alpha"),
            ("1.2.3.[100-110]", "1.2.3.100"),
            ("1.2.3.[089, 100-110]", "1.2.3.089"),
            ("host[22]", "host22"),
            ("host[1,5-9]", "host1"),
            ("host[5-9,1]", "host5"),
            ("alpha, host[5-9], gamma", "alpha"),
            ("alpha[3,1], beta", "alpha3"),
        ] {
            assert_eq!(first_host(list).unwrap(), first, "{list}");
        }
    }
}
